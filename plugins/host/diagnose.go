package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/kvconnect/kvconnect/errdefs"
	"github.com/kvconnect/kvconnect/internal/pluginrpc"
)

// stderrTailMax is how much of the end of a plugin's stderr is kept for
// diagnoses; stderrQuoteLines is how many of its last lines a cause quotes.
const (
	stderrTailMax    = 8 << 10
	stderrQuoteLines = 40
)

func canceledError(name, path string, err error) *errdefs.InitError {
	return &errdefs.InitError{
		Transport: name, Step: errdefs.StepStartPlugin,
		Cause: fmt.Sprintf("starting %s was abandoned: %v", path, err),
		Hints: []string{"the caller canceled the start or its deadline passed; allow more time if the plugin is slow to start"},
		Err:   fmt.Errorf("%w: %w", errdefs.ErrPluginStart, errdefs.FromContext(err)),
	}
}

// startError diagnoses a plugin that did not come up, from what was
// observed: how exec failed, what the plugin printed on stdout, how its
// process ended, and how long it took. goErr (go-plugin's error) is only
// quoted, never inspected.
func (p *Plugin) startError(ctx context.Context, cfg LaunchConfig, goErr error, took time.Duration) *errdefs.InitError {
	r := p.proc
	if err := r.startError(); err != nil {
		return execError(cfg.Name, p.path, err)
	}
	if r.wasCanceled() {
		return canceledError(cfg.Name, p.path, ctx.Err())
	}
	if !r.wasAttempted() {
		// go-plugin failed before it asked us to start the process: it
		// could not create the socket directory.
		code, name := errnoOf(goErr)
		return &errdefs.InitError{
			Transport: cfg.Name, Step: errdefs.StepStartPlugin, NativeCode: code, NativeName: name,
			Cause: fmt.Sprintf("cannot prepare to start %s: %v", p.path, goErr),
			Hints: []string{fmt.Sprintf("the plugin's socket directory is created in the temporary directory %s: check that it exists, is writable and is not full (or point TMPDIR elsewhere)", os.TempDir())},
			Err:   fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart),
		}
	}
	st := r.state()
	line, complete := r.stdout.firstLine()
	tail := lastLines(r.tail.String(), stderrQuoteLines)
	ie := &errdefs.InitError{Transport: cfg.Name, Step: errdefs.StepHandshake, Err: fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrHandshake)}
	var ended string // how the process ended, in words; "" while it ran until we killed it
	if st != nil && !(r.wasKilled() && killedBySIGKILL(st)) {
		ie.NativeCode, ie.NativeName, ended = exitInfo(st)
	}
	quoteTail := func(s string) string {
		if tail != "" {
			s += "; its stderr ends with:\n" + indent(tail)
		}
		return s
	}
	withTail := func(s string) string {
		if ended != "" {
			s += "; it " + ended
		}
		return quoteTail(s)
	}
	hs, hsErr := parseHandshakeLine(line)
	switch {
	case st != nil && st.ExitCode() == pluginrpc.ExitCookieMismatch:
		ie.Cause = withTail(fmt.Sprintf("%s was built with a kvconnect plugin SDK whose handshake cookie differs from this host's (%s=%s): it refused the handshake",
			p.path, pluginrpc.CookieKey, pluginrpc.CookieValue))
		ie.Hints = []string{
			"the plugin and this host were built against incompatible versions of the kvconnect plugin SDK (github.com/kvconnect/kvconnect/plugins)",
			"install the plugin that ships with this kvconnect version, or rebuild the plugin against the host's SDK",
		}
	case line != "" && hsErr != nil:
		ie.Cause = withTail(fmt.Sprintf("%s is not a kvconnect transport plugin: instead of the go-plugin handshake it printed %q on stdout", p.path, line))
		ie.Hints = []string{
			fmt.Sprintf("check that %s is a kvconnect transport plugin (kvconnect-transport-<name>, built with plugins.Serve) and not another program installed under that name", p.path),
			"a plugin must not print anything on stdout before plugins.Serve: log to stderr",
		}
	case line != "" && hs.core != plugin.CoreProtocolVersion:
		ie.Cause = withTail(fmt.Sprintf("%s speaks go-plugin core protocol %d, this host speaks %d", p.path, hs.core, plugin.CoreProtocolVersion))
		ie.Hints = []string{"the plugin was built with an incompatible version of hashicorp/go-plugin: rebuild it against the kvconnect plugin SDK of this host"}
	case line != "" && !acceptsVersion(hs.version):
		ie.Cause = withTail(fmt.Sprintf("%s speaks kvconnect plugin protocol version %d; this host speaks %s",
			p.path, hs.version, strings.Join(acceptedVersions(), ", ")))
		if hs.version > pluginrpc.ProtocolVersion {
			ie.Hints = []string{"the plugin is newer than this host: upgrade kvconnect, or install the plugin version that ships with this kvconnect"}
		} else {
			ie.Hints = []string{"the plugin is older than this host: upgrade the plugin, or install the one that ships with this kvconnect"}
		}
	case line != "" && hs.protocol != plugin.ProtocolGRPC:
		ie.Cause = withTail(fmt.Sprintf("%s serves go-plugin protocol %q; kvconnect plugins must serve %q", p.path, hs.protocol, plugin.ProtocolGRPC))
		ie.Hints = []string{"build the plugin with plugins.Serve, which serves gRPC"}
	case line != "":
		// A valid handshake line, but no connection to the address it named.
		ie.Cause = withTail(fmt.Sprintf("%s answered the handshake (%s) but the host could not connect to it: %v", p.path, line, goErr))
		ie.Hints = []string{"check that the plugin's socket directory (" + os.TempDir() + ") is writable and not full, and that nothing removes files there"}
	case ended != "":
		ie.Step = errdefs.StepStartPlugin
		ie.Err = fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart)
		ie.Cause = quoteTail(fmt.Sprintf("%s %s before the plugin handshake", p.path, ended))
		ie.Hints = exitHints(p.path, st)
	case took >= cfg.StartTimeout:
		ie.Cause = withTail(fmt.Sprintf("%s did not complete the plugin handshake within %v", p.path, cfg.StartTimeout))
		if partial := r.stdout.String(); partial != "" && !complete {
			ie.Cause += fmt.Sprintf("; it printed %q on stdout without ending the line", partial)
		}
		ie.Hints = []string{
			fmt.Sprintf("check that %s is a kvconnect transport plugin (built with plugins.Serve); a program that is not one never answers", p.path),
			"if the host is heavily loaded or the plugin initialises slowly before plugins.Serve, raise the start timeout (LaunchConfig.StartTimeout, default 10s)",
		}
	default:
		ie.Cause = withTail(fmt.Sprintf("%s closed its stdout without completing the plugin handshake, and the host killed it: %v", p.path, goErr))
		ie.Hints = []string{"a plugin must keep stdout open for the handshake: check that it does not close or redirect it before plugins.Serve"}
	}
	return ie
}

// handshakeLine is go-plugin's handshake: CORE|APP|NETWORK|ADDR|PROTOCOL.
type handshakeLine struct {
	core, version int
	protocol      plugin.Protocol
}

func parseHandshakeLine(line string) (handshakeLine, error) {
	parts := strings.Split(strings.TrimSpace(line), "|")
	if len(parts) < 4 {
		return handshakeLine{}, fmt.Errorf("%d fields, want at least 4: %w", len(parts), errdefs.ErrProtocol)
	}
	var h handshakeLine
	var err error
	if h.core, err = strconv.Atoi(parts[0]); err != nil {
		return h, fmt.Errorf("core protocol %q: %w", parts[0], errdefs.ErrProtocol)
	}
	if h.version, err = strconv.Atoi(parts[1]); err != nil {
		return h, fmt.Errorf("protocol version %q: %w", parts[1], errdefs.ErrProtocol)
	}
	h.protocol = plugin.ProtocolNetRPC // go-plugin's default when the field is absent
	if len(parts) >= 5 && parts[4] != "" {
		h.protocol = plugin.Protocol(parts[4])
	}
	return h, nil
}

func acceptsVersion(v int) bool {
	_, ok := pluginrpc.VersionedPlugins()[v]
	return ok
}

func acceptedVersions() []string {
	var out []string
	for v := range pluginrpc.VersionedPlugins() {
		out = append(out, strconv.Itoa(v))
	}
	return out
}

// exitHints says what to do about a plugin that exited before its
// handshake, from how it exited.
func exitHints(path string, st *os.ProcessState) []string {
	run := fmt.Sprintf("run it by hand to see everything it says: %s=%s %s", pluginrpc.CookieKey, pluginrpc.CookieValue, path)
	switch code := st.ExitCode(); {
	case code == 127:
		// The dynamic loader exits 127 when a shared library is missing.
		return []string{
			fmt.Sprintf("exit status 127 usually means the dynamic loader could not load a shared library the plugin needs: run ldd %s and install the package that provides each library marked \"not found\" (or set LD_LIBRARY_PATH)", path),
			run,
		}
	case code == 1:
		return []string{
			run,
			"if it says it is a plugin not meant to be executed directly, it was built with a kvconnect plugin SDK whose handshake cookie differs from this host's: install the plugin that ships with this kvconnect",
		}
	case code < 0 && killedBySIGKILL(st):
		return []string{
			"something else killed the plugin with SIGKILL: most often the kernel's OOM killer (check dmesg or journalctl -k for \"Out of memory\"), or a cgroup memory limit",
			run,
		}
	case code < 0:
		return []string{
			"the plugin crashed before its handshake: this is a bug in the plugin or in a library it loads; report it with the stderr above",
			run,
		}
	}
	return []string{"the plugin gave up before its handshake: its stderr above says why", run}
}

// execError diagnoses a plugin binary the kernel would not run.
func execError(name, path string, err error) *errdefs.InitError {
	ie := &errdefs.InitError{Transport: name, Step: errdefs.StepStartPlugin, Err: fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginStart)}
	ie.NativeCode, ie.NativeName = errnoOf(err)
	var ee *exec.Error
	if errors.As(err, &ee) {
		ie.Step = errdefs.StepFindPlugin
		ie.Err = fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginNotFound)
		ie.Cause = fmt.Sprintf("%s: not found on PATH (%s)", ee.Name, os.Getenv("PATH"))
		ie.Hints = []string{"give the plugin's full path, or install it where FindPlugin looks (plugin_dir, " + EnvPluginDir + ", beside the executable, PATH)"}
		return ie
	}
	st, statErr := os.Stat(path)
	errno, _ := errnoValue(err)
	switch {
	case errno == errENOENT && statErr != nil:
		ie.Step = errdefs.StepFindPlugin
		ie.Err = fmt.Errorf("%w: %w", errdefs.ErrUnavailable, errdefs.ErrPluginNotFound)
		ie.Cause = fmt.Sprintf("%s does not exist", path)
		ie.Hints = []string{"fix the plugin path, or install the plugin there"}
	case errno == errENOENT:
		// The file is there, so what is missing is its interpreter.
		interp := interpreter(path)
		if interp == "" {
			interp = "its program interpreter"
		}
		ie.Cause = fmt.Sprintf("%s exists but the kernel cannot find %s, which it needs to run it", path, interp)
		ie.Hints = []string{
			"the binary was built for another system (another C library such as musl, or another distribution): rebuild it on this host, or statically (CGO_ENABLED=0 for a pure-Go plugin)",
			"if it is a script, install the interpreter named on its #! line",
		}
	case errno == errEACCES && st != nil && st.IsDir():
		ie.Cause = fmt.Sprintf("%s is a directory, not a plugin binary", path)
		ie.Hints = []string{"give the path of the plugin file itself (kvconnect-transport-<name>), or set plugin_dir to this directory and the transport name instead"}
	case errno == errEACCES:
		if st != nil && st.Mode().Perm()&0o111 == 0 {
			ie.Cause = fmt.Sprintf("%s is not executable (mode %v)", path, st.Mode().Perm())
			ie.Hints = []string{fmt.Sprintf("make it executable: chmod +x %s", path)}
		} else {
			ie.Cause = fmt.Sprintf("permission denied running %s", path)
			if st != nil {
				ie.Cause += fmt.Sprintf(" (mode %v)", st.Mode().Perm())
			}
			ie.Hints = []string{
				fmt.Sprintf("the file system holding it may be mounted noexec: check with findmnt -T %s, or install the plugin elsewhere", path),
				"every directory on its path must be searchable (x) by this user; a security module (SELinux, AppArmor) may also deny it: check the audit log",
			}
		}
	case errno == errENOEXEC:
		ie.Cause = fmt.Sprintf("%s is not a program this host can run: %s", path, describeBinary(path))
		ie.Hints = []string{
			fmt.Sprintf("install the plugin built for this host (%s), e.g. GOOS=%s GOARCH=%s go build", hostPlatform(), hostOS(), hostArch()),
			"if the file is truncated or corrupt (an interrupted copy or download), reinstall it",
			"a script needs a #! line naming its interpreter",
		}
	case errno == errETXTBSY:
		ie.Cause = fmt.Sprintf("%s is being written by another process", path)
		ie.Hints = []string{"wait for the installation or copy to finish, then retry"}
	default:
		ie.Cause = fmt.Sprintf("cannot run %s: %v", path, err)
		ie.Hints = []string{"check the process limits (ulimit -u, ulimit -n) and free memory"}
	}
	return ie
}

func indent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
