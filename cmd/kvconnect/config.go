package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvconnect/kvconnect/config"
	"github.com/kvconnect/kvconnect/units"
)

func init() { subcommands = append(subcommands, newConfigCommand) }

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the effective configuration, or check config files",
		Long: `config show prints the effective configuration as the other commands would
load it (defaults, --config file, kv_transfer_config, environment, flags),
with --sources the layer each value came from, then notes on conflicts,
ignored vLLM fields and warnings.

config check FILE... checks each file on its own: a kvconnect config
(.yaml, .yml, .toml, .json), a vLLM kv_transfer_config (.json with a
kv_connector or kv_role field) or an environment file (.env, KEY=VALUE
lines as SGLang users keep them). Without files it checks what show would
load. It exits 0 when everything is valid, 1 with the full list of problems
otherwise.`,
		// Without a known subcommand: an error (exit 1), not the help and
		// exit 0, so a typo in a script fails.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("config: name a subcommand: show or check (kvconnect config --help)")
		},
	}
	cmd.AddCommand(newConfigShowCommand(), newConfigCheckCommand())
	return cmd
}

func newConfigShowCommand() *cobra.Command {
	var sources, asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration (with --sources: where each value came from)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			loaded, err := config.Load(config.Options{Flags: cmd.Flags(), Environ: environ()})
			problems := config.Problems(err)
			out := cmd.OutOrStdout()
			if asJSON {
				if jerr := writeShowJSON(out, loaded, problems); jerr != nil {
					return jerr
				}
			} else {
				writeShowText(out, loaded, problems, sources)
			}
			if len(problems) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "kvconnect: config: %s\n", countProblems(len(problems)))
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&sources, "sources", false, "show where each value came from")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (always with sources)")
	return cmd
}

func newConfigCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check [FILE...]",
		Short: "Check config files (kvconnect, vLLM kv_transfer_config, .env); exit 1 listing every problem",
		RunE: func(cmd *cobra.Command, files []string) error {
			out := cmd.OutOrStdout()
			if len(files) == 0 {
				loaded, err := config.Load(config.Options{Flags: cmd.Flags(), Environ: environ()})
				if reportCheck(out, "effective configuration", loaded, err) > 0 {
					return exitError{code: 1}
				}
				return nil
			}
			// Each file is checked on its own: configuration flags would
			// apply to none of them.
			var given []string
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if f.Name != "log-level" && f.Name != "log-format" {
					given = append(given, "--"+f.Name)
				}
			})
			if len(given) > 0 {
				return fmt.Errorf("%s: not used when files are named (each file is checked on its own); run config check without files to check flags with the rest of the configuration", strings.Join(given, ", "))
			}
			bad := 0
			for _, f := range files {
				loaded, err := checkFile(f)
				if reportCheck(out, f, loaded, err) > 0 {
					bad++
				}
			}
			if bad > 0 {
				if len(files) > 1 {
					fmt.Fprintf(out, "%d of %d files have problems\n", bad, len(files))
				}
				return exitError{code: 1}
			}
			return nil
		},
	}
}

// checkFile loads one file on its own, as what its name and content say
// it is.
func checkFile(path string) (*config.Loaded, error) {
	if strings.TrimSpace(path) == "" {
		// (an unset shell variable: "config check "$CFG"" must not pass)
		return nil, &config.Problem{Key: "config", Value: path, Reason: "an empty file name", Allowed: "the path of a config file"}
	}
	switch kind := fileKind(path); kind {
	case "env":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &config.Problem{Key: "config", Value: path, Reason: "cannot read the file: " + err.Error()}
		}
		env, err := config.ParseEnvFile(filepath.Base(path), b)
		loaded, lerr := config.Load(config.Options{Environ: env})
		return loaded, errors.Join(err, lerr)
	case "vllm":
		return config.Load(config.Options{KVTransferConfig: "@" + path, Environ: []string{}})
	default:
		return config.Load(config.Options{ConfigFile: path, ConfigFileSource: "argument", Environ: []string{}})
	}
}

// fileKind says whether path is an environment file ("env"), a vLLM
// kv_transfer_config ("vllm": JSON with a kv_connector, kv_role or
// kv_connector_extra_config field) or a kvconnect config ("kvconnect").
func fileKind(path string) string {
	base := strings.ToLower(filepath.Base(path))
	if strings.HasSuffix(base, ".env") || base == ".env" {
		return "env"
	}
	if strings.HasSuffix(base, ".json") {
		b, err := os.ReadFile(path)
		if err == nil {
			var m map[string]json.RawMessage
			if json.Unmarshal(b, &m) == nil {
				for _, k := range []string{"kv_connector", "kv_role", "kv_connector_extra_config"} {
					if _, ok := m[k]; ok {
						return "vllm"
					}
				}
			}
		}
	}
	return "kvconnect"
}

// reportCheck prints one input's verdict and returns its number of
// problems.
func reportCheck(w io.Writer, name string, loaded *config.Loaded, err error) int {
	problems := config.Problems(err)
	if len(problems) == 0 && err != nil {
		problems = []*config.Problem{{Reason: err.Error()}}
	}
	if len(problems) == 0 {
		fmt.Fprintf(w, "%s: ok\n", name)
	} else {
		fmt.Fprintf(w, "%s: %s\n", name, countProblems(len(problems)))
		for _, p := range problems {
			fmt.Fprintf(w, "  - %s\n", p.Text())
		}
	}
	if loaded != nil {
		for _, p := range loaded.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", p.Text())
		}
		for _, n := range loaded.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, ig := range loaded.Ignored {
			fmt.Fprintf(w, "  ignored: %s\n", describeIgnored(ig))
		}
	}
	return len(problems)
}

func countProblems(n int) string {
	if n == 1 {
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", n)
}

func describeIgnored(ig config.Ignored) string {
	return fmt.Sprintf("%s = %s (from %s): %s", ig.Field, showAny(ig.Value), ig.Source, ig.Reason)
}

// writeShowText prints the effective values as an aligned table, then
// inputs, notes, ignored fields, warnings and problems.
func writeShowText(w io.Writer, loaded *config.Loaded, problems []*config.Problem, sources bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if sources {
		fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	}
	for _, v := range loaded.Values() {
		val := formatValue(v)
		if sources {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Key, val, v.Source)
		} else {
			fmt.Fprintf(tw, "%s\t%s\n", v.Key, val)
		}
	}
	tw.Flush()
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, l := range lines {
			fmt.Fprintf(w, "  - %s\n", l)
		}
	}
	if sources {
		section("inputs", loaded.Inputs)
	}
	section("notes", loaded.Notes)
	var ign []string
	for _, ig := range loaded.Ignored {
		ign = append(ign, describeIgnored(ig))
	}
	section("ignored (vLLM fields with no meaning for kvconnect)", ign)
	var warns []string
	for _, p := range loaded.Warnings {
		warns = append(warns, p.Text())
	}
	section("warnings", warns)
	var probs []string
	for _, p := range problems {
		probs = append(probs, p.Text())
	}
	section("problems", probs)
}

// formatValue shows a value for people.
func formatValue(v config.Value) string {
	var s string
	switch x := v.Value.(type) {
	case nil:
		if v.Key == "fallback" {
			s = "(default chain for the protocol)"
		} else {
			s = "(not set)"
		}
	case string:
		s = x
		if s == "" {
			s = `""`
		}
	case []string:
		if len(x) == 0 {
			s = "[] (strict: no fallback)"
		} else {
			s = "[" + strings.Join(x, ", ") + "]"
		}
	case uint64:
		s = fmt.Sprint(x)
		if x != 0 && x%1024 == 0 {
			s += " (" + units.FormatSize(x) + ")"
		}
	default:
		s = showAny(x)
	}
	if v.Raw != nil {
		raw, ok := v.Raw.(string)
		if !ok {
			raw = showAny(v.Raw)
		}
		s += " (resolved from " + raw + ")"
	}
	return s
}

func showAny(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String() // auth.Secret: <redacted>
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

type problemJSON struct {
	*config.Problem
	Message string `json:"message"`
}

func problemsJSON(ps []*config.Problem) []problemJSON {
	out := make([]problemJSON, 0, len(ps))
	for _, p := range ps {
		out = append(out, problemJSON{Problem: p, Message: p.Text()})
	}
	return out
}

func writeShowJSON(w io.Writer, loaded *config.Loaded, problems []*config.Problem) error {
	doc := struct {
		Values   []config.Value   `json:"values"`
		Inputs   []string         `json:"inputs"`
		Notes    []string         `json:"notes"`
		Ignored  []config.Ignored `json:"ignored"`
		Warnings []problemJSON    `json:"warnings"`
		Problems []problemJSON    `json:"problems"`
	}{loaded.Values(), nonNil(loaded.Inputs), nonNil(loaded.Notes), loaded.Ignored,
		problemsJSON(loaded.Warnings), problemsJSON(problems)}
	if doc.Ignored == nil {
		doc.Ignored = []config.Ignored{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
