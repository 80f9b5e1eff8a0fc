package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testSecret = "s3cret-of-enough-bytes-for-a-test"

// shows reports whether any text a user can see of a load shows the secret.
func shows(t *testing.T, l *Loaded, err error, secret string) bool {
	t.Helper()
	var out []string
	if err != nil {
		out = append(out, err.Error())
	}
	if l != nil {
		b, _ := json.Marshal(l.Values())
		c, _ := json.Marshal(l.Config)
		out = append(out, string(b), string(c), fmt.Sprintf("%+v %#v", l.Config, l.Config))
		for _, v := range l.Values() {
			out = append(out, fmt.Sprint(v.Value))
		}
		for _, w := range l.Warnings {
			out = append(out, w.Error())
		}
		out = append(out, l.Notes...)
	}
	return strings.Contains(strings.Join(out, "\n"), secret)
}

func TestAuthSecretFromEnv(t *testing.T) {
	l := mustLoad(t, Options{Environ: []string{"KVCONNECT_AUTH_SECRET=" + testSecret}})
	k, err := l.Config.Keyring()
	if err != nil || k.Len() != 1 {
		t.Fatalf("Keyring: %v, %v", k, err)
	}
	if v, _ := l.Value("auth_secret"); fmt.Sprint(v.Value) != "(hidden)" || v.Source != "env KVCONNECT_AUTH_SECRET" {
		t.Errorf("auth_secret shows as %v from %s", v.Value, v.Source)
	}
	if l.Config.MooncakeInterop == nil || *l.Config.MooncakeInterop {
		t.Errorf("mooncake_interop %v with auth on, want false", l.Config.MooncakeInterop)
	}
	if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "mooncake_interop is off: auth is on (from auth_secret from env KVCONNECT_AUTH_SECRET)") {
		t.Errorf("notes %q", l.Notes)
	}
	if shows(t, l, nil, testSecret) {
		t.Error("the secret shows in the loaded config")
	}
}

func TestAuthSecretProblems(t *testing.T) {
	dir := t.TempDir()
	short := writeFile(t, dir, "short", "# rotation file\n"+testSecret+"\ntooshort\n")
	empty := writeFile(t, dir, "empty", "# nothing\n\n")
	for _, tc := range []struct {
		name   string
		env    []string
		key    string
		says   string
		secret string // must not show
	}{
		{"short secret", []string{"KVCONNECT_AUTH_SECRET=tooshort-x"}, "auth_secret", "10 bytes long", "tooshort-x"},
		{"both set", []string{"KVCONNECT_AUTH_SECRET=" + testSecret, "KVCONNECT_AUTH_SECRET_FILE=" + short}, "auth_secret", "both auth_secret and auth_secret_file", testSecret},
		{"missing file", []string{"KVCONNECT_AUTH_SECRET_FILE=" + filepath.Join(dir, "nope")}, "auth_secret_file", "cannot read it: no such file or directory", ""},
		{"short line", []string{"KVCONNECT_AUTH_SECRET_FILE=" + short}, "auth_secret_file", "line 3: a secret of 8 bytes", "tooshort"},
		{"no secret in file", []string{"KVCONNECT_AUTH_SECRET_FILE=" + empty}, "auth_secret_file", "no secret in the file", ""},
		{"mooncake interop on", []string{"KVCONNECT_AUTH_SECRET=" + testSecret, "KVCONNECT_MOONCAKE_INTEROP=true"}, "mooncake_interop", "Mooncake peers cannot authenticate", testSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, probs := loadErr(t, Options{Environ: tc.env})
			var found bool
			for _, p := range probs {
				if p.Key == tc.key && strings.Contains(p.Error(), tc.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v, want one for %s saying %q", probs, tc.key, tc.says)
			}
			if tc.secret != "" {
				var all []string
				for _, p := range probs {
					all = append(all, p.Error())
				}
				if strings.Contains(strings.Join(all, "\n"), tc.secret) || shows(t, l, nil, tc.secret) {
					t.Errorf("a problem or value shows the secret: %v", all)
				}
			}
		})
	}
}

func TestAuthSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secrets")
	if err := os.WriteFile(p, []byte("# new first, then the old one\n"+testSecret+"-new\n\n"+testSecret+"-old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := mustLoad(t, Options{Flags: flags(t, "--auth-secret-file", p)})
	k, err := l.Config.Keyring()
	if err != nil || k.Len() != 2 {
		t.Fatalf("Keyring: %v, %v", k, err)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("warnings %v for a mode 600 file", l.Warnings)
	}
	if shows(t, l, nil, testSecret) {
		t.Error("the secret shows")
	}
	os.Chmod(p, 0o644)
	l = mustLoad(t, Options{Flags: flags(t, "--auth-secret-file", p)})
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0].Error(), "other users can read it") || l.Warnings[0].Suggestion != "chmod 600 "+p {
		t.Errorf("warnings %v for a mode 644 file", l.Warnings)
	}
}

// TestAuthSecretInCode: Validate checks a secret set in code, and refuses
// mooncake_interop turned on beside it.
func TestAuthSecretInCode(t *testing.T) {
	if err := (Config{AuthSecret: testSecret}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	err := Config{AuthSecret: "short"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "auth_secret = ") || strings.Contains(err.Error(), "short") && !strings.Contains(err.Error(), "5 bytes") {
		t.Errorf("Validate of a short secret: %v", err)
	}
	if err := (Config{AuthSecret: testSecret, MooncakeInterop: Bool(true)}).Validate(); err == nil || !strings.Contains(err.Error(), "mooncake_interop") {
		t.Errorf("Validate with interop on: %v", err)
	}
}

// TestAuthSecretInCodeTrimmed: a secret set in code with a newline (read
// with os.ReadFile) proves the same key as the same secret from a file.
func TestAuthSecretInCodeTrimmed(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "secret", testSecret+"\n")
	os.Chmod(p, 0o600)
	fromFile, err := Config{AuthSecretFile: p}.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	inCode, err := Config{AuthSecret: testSecret + "\n"}.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	if fromFile.KeyID() != inCode.KeyID() {
		t.Errorf("key id %v from a file, %v from code with a newline: peers would refuse each other", fromFile.KeyID(), inCode.KeyID())
	}
}

// TestAuthSecretInTwoPlacesHidden: a secret set in a file and in the
// environment: the variable wins, and neither shows anywhere.
func TestAuthSecretInTwoPlacesHidden(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "kvconnect.yaml", "auth_secret: "+testSecret+"-from-file\n")
	l := mustLoad(t, Options{ConfigFile: file, Environ: []string{"KVCONNECT_AUTH_SECRET=" + testSecret + "-from-env"}})
	if shows(t, l, nil, testSecret) {
		t.Fatalf("the secret shows: notes %q", l.Notes)
	}
	if l.Config.AuthSecret != testSecret+"-from-env" || l.Source("auth_secret") != "env KVCONNECT_AUTH_SECRET" {
		t.Errorf("auth_secret from %s", l.Source("auth_secret"))
	}
}

// TestEmptyAuthSecretIsAnError: a secret written but empty (what
// KVCONNECT_AUTH_SECRET="$(cat /missing)" gives) must not read as "auth
// off": that would run the node unauthenticated without a word.
func TestEmptyAuthSecretIsAnError(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Options
		key  string
		src  string
	}{
		{"env empty", Options{Environ: []string{"KVCONNECT_AUTH_SECRET="}}, "auth_secret", "env KVCONNECT_AUTH_SECRET"},
		{"env blank", Options{Environ: []string{"KVCONNECT_AUTH_SECRET=  \n"}}, "auth_secret", "env KVCONNECT_AUTH_SECRET"},
		{"env blank over a file's secret", Options{Environ: []string{"KVCONNECT_AUTH_SECRET= ",
			"KVCONNECT_CONFIG=" + writeFile(t, dir, "c.yaml", "auth_secret: "+testSecret+"\n")}}, "auth_secret", "env KVCONNECT_AUTH_SECRET"},
		{"secret file path empty", Options{Environ: []string{"KVCONNECT_AUTH_SECRET_FILE="}}, "auth_secret_file", "env KVCONNECT_AUTH_SECRET_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := loadErr(t, tc.opts)
			var found bool
			for _, p := range probs {
				if p.Key == tc.key && !p.Warning && strings.Contains(p.Error(), "set, but empty") && strings.Contains(p.Source, tc.src) {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v, want an error for %s (set, but empty) from %s", probs, tc.key, tc.src)
			}
		})
	}
	// Unset, or written empty in a file (the example configs' way to
	// say off), stays "auth off" without a problem.
	for _, o := range []Options{{}, {Environ: []string{"KVCONNECT_CONFIG=" + writeFile(t, dir, "off.yaml", "auth_secret: \"\"\n")}}} {
		l := mustLoad(t, o)
		if k, err := l.Config.Keyring(); k != nil || err != nil {
			t.Errorf("no secret (%v): keyring %v, %v", o.Environ, k, err)
		}
	}
}
