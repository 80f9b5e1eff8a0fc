package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kvconnect/kvconnect/auth"
)

// redactedValue stands for a secret in a Problem.
const redactedValue = auth.Secret("")

// Keyring returns the node's authentication keyring: nil when neither
// auth_secret nor auth_secret_file is set (authentication off). It reads
// auth_secret_file each time it is called.
func (c Config) Keyring() (*auth.Keyring, error) {
	k, p := c.keyring(os.ReadFile)
	if p != nil {
		return nil, p
	}
	return k, nil
}

func (c Config) keyring(read func(string) ([]byte, error)) (*auth.Keyring, *Problem) {
	switch {
	case c.AuthSecret != "" && c.AuthSecretFile != "":
		return nil, &Problem{Key: "auth_secret", Value: redactedValue, Reason: "both auth_secret and auth_secret_file (" + c.AuthSecretFile + ") are set",
			Allowed: "one of them", Err: ErrInvalid}
	case c.AuthSecret != "":
		// Trimmed as a file's or the environment's is: a secret read with
		// os.ReadFile in code keeps its newline, and would prove another
		// key than the same secret loaded from a file.
		c.AuthSecret = auth.Secret(strings.TrimSpace(string(c.AuthSecret)))
		if len(c.AuthSecret) < auth.MinSecretLen {
			return nil, &Problem{Key: "auth_secret", Value: redactedValue,
				Reason:  fmt.Sprintf("%d bytes long", len(c.AuthSecret)),
				Allowed: fmt.Sprintf("at least %d bytes; make one with: head -c 32 /dev/urandom | base64", auth.MinSecretLen)}
		}
		k, err := auth.NewKeyring(c.AuthSecret)
		if err != nil {
			return nil, &Problem{Key: "auth_secret", Value: redactedValue, Reason: err.Error()}
		}
		return k, nil
	case c.AuthSecretFile != "":
		b, err := read(c.AuthSecretFile)
		if err != nil {
			reason := err.Error()
			var pe *os.PathError
			if errors.As(err, &pe) {
				reason = pe.Err.Error()
			}
			return nil, &Problem{Key: "auth_secret_file", Value: c.AuthSecretFile, Reason: "cannot read it: " + reason,
				Allowed: "a readable file holding one secret per line"}
		}
		secrets, line, bad := parseSecrets(b)
		if bad != "" {
			return nil, &Problem{Key: "auth_secret_file", Value: c.AuthSecretFile, Reason: fmt.Sprintf("line %d: %s", line, bad),
				Allowed: fmt.Sprintf("one secret of at least %d bytes per line (make one with: head -c 32 /dev/urandom | base64)", auth.MinSecretLen)}
		}
		k, err := auth.NewKeyring(secrets...)
		if err != nil {
			return nil, &Problem{Key: "auth_secret_file", Value: c.AuthSecretFile, Reason: err.Error()}
		}
		return k, nil
	}
	return nil, nil
}

// parseSecrets reads one secret per line, skipping blank lines and lines
// starting with #. It reports the first bad line (never its text).
func parseSecrets(b []byte) ([]auth.Secret, int, string) {
	var out []auth.Secret
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if len(l) < auth.MinSecretLen {
			return nil, n, fmt.Sprintf("a secret of %d bytes", len(l))
		}
		out = append(out, auth.Secret(l))
	}
	if err := sc.Err(); err != nil {
		return nil, n + 1, err.Error()
	}
	if len(out) == 0 {
		return nil, n, "no secret in the file"
	}
	return out, 0, ""
}

// authSource says where the auth setting came from, for notes.
func authSource(eff map[string]entry) string {
	for _, k := range []string{"auth_secret", "auth_secret_file"} {
		if e, ok := eff[k]; ok && e.source != "default" && e.source != "" {
			return k + " from " + e.source
		}
	}
	return "code"
}

// checkAuth reports a bad secret or secret file, a secret file others can
// read, and mooncake_interop turned on beside a secret.
func (ck *checker) checkAuth(c *Config, read func(string) ([]byte, error)) {
	if !ck.ok("auth_secret") || !ck.ok("auth_secret_file") {
		return
	}
	if read == nil {
		read = os.ReadFile
	}
	// An empty variable: most often a secret that failed to load (the
	// file behind KVCONNECT_AUTH_SECRET="$(cat ...)" missing, a mount not
	// there). Read as unset it would turn authentication off, for the
	// whole deployment, without a word: so it is an error. (An empty
	// string written in a file is the documented way to say "off".)
	for _, key := range []string{"auth_secret", "auth_secret_file"} {
		if ck.origin == nil {
			break
		}
		v, src := ck.origin(key)
		var str string
		switch x := v.(type) {
		case auth.Secret:
			str = string(x)
		case string:
			str = x
		}
		if strings.HasPrefix(src, "env ") && strings.TrimSpace(str) == "" {
			ck.add(&Problem{Key: key, Value: redactedValue, Reason: "the variable is set, but empty (a secret that failed to load?)",
				Allowed: "a secret (auth_secret) or a file of secrets (auth_secret_file); to run without authentication, unset the variable"})
			return
		}
	}
	k, p := c.keyring(read)
	if p != nil {
		ck.add(p)
		return
	}
	if k == nil {
		return
	}
	if c.AuthSecretFile != "" {
		if st, err := os.Stat(c.AuthSecretFile); err == nil && st.Mode().Perm()&0o077 != 0 {
			ck.add(&Problem{Key: "auth_secret_file", Value: c.AuthSecretFile, Warning: true,
				Reason:     fmt.Sprintf("other users can read it (mode %v)", st.Mode().Perm()),
				Suggestion: "chmod 600 " + c.AuthSecretFile})
		}
	}
	if ck.ok("mooncake_interop") && c.MooncakeInterop != nil && *c.MooncakeInterop {
		if ck.origin != nil {
			if _, src := ck.origin("mooncake_interop"); src == "default" {
				return
			}
		}
		ck.add(&Problem{Key: "mooncake_interop", Value: true,
			Reason:  "Mooncake peers cannot authenticate, and auth is on (auth_secret or auth_secret_file is set)",
			Allowed: "false (or unset) while auth is on; Mooncake peers are refused"})
	}
}
