package plugins

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

// BinaryPrefix starts the name of every transport plugin executable:
// kvconnect-transport-<name>.
const BinaryPrefix = "kvconnect-transport-"

// EnvPluginDir names a directory searched first for plugin binaries.
const EnvPluginDir = "KVCONNECT_PLUGIN_DIR"

// LaunchConfig says which plugin to start and how.
type LaunchConfig struct {
	// Name is the transport's name; the binary is kvconnect-transport-<Name>.
	Name string
	// Path, when set, is the plugin binary to run; no search is done.
	Path string
	// PluginDir is the plugin_dir setting, searched first.
	PluginDir string
	// Logger receives the plugin's logs (named plugin.<Name>). Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the go-plugin handshake. Default 10s.
	StartTimeout time.Duration
	// GRPCMaxMessageSize caps gRPC messages both ways (bytes); 0 = gRPC's
	// default. Tests use it to prove no payload crosses gRPC.
	GRPCMaxMessageSize int
	// Env is extra environment for the plugin process (KEY=VALUE). It is
	// added after the host's environment, so its entries win.
	Env []string
}

// place is one path FindPlugin looks at, and why it looks there.
type place struct {
	path   string
	source string // "plugin_dir", "$KVCONNECT_PLUGIN_DIR", "beside the executable", "$PATH"
	note   string // why a file there was not used, if one exists
}

func (p place) String() string {
	s := p.path + " (" + p.source
	if p.note != "" {
		s += ": " + p.note
	}
	return s + ")"
}

// searchPlaces lists, in order and without duplicates, where
// kvconnect-transport-<name> is looked for.
func searchPlaces(name, pluginDir string) []place {
	bin := BinaryPrefix + name
	var out []place
	seen := map[string]bool{}
	add := func(dir, source string) {
		if dir == "" {
			return
		}
		p := filepath.Join(dir, bin)
		if seen[p] {
			return
		}
		seen[p] = true
		out = append(out, place{path: p, source: source})
	}
	add(pluginDir, "plugin_dir")
	add(os.Getenv(EnvPluginDir), "$"+EnvPluginDir)
	if exe, err := os.Executable(); err == nil {
		add(filepath.Dir(exe), "beside the executable")
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(d) { // like exec.LookPath, never run from a relative PATH entry
			add(d, "$PATH")
		}
	}
	return out
}

// FindPlugin looks for kvconnect-transport-<name>: in pluginDir (the
// plugin_dir setting), in $KVCONNECT_PLUGIN_DIR, beside the running
// executable, then in each directory on PATH. It returns the path and every
// path searched, in order. When nothing is found the error is an *InitError
// (step StepFindPlugin) wrapping ErrUnavailable and ErrPluginNotFound that
// names every path searched; when the only match is not executable it is an
// *InitError (step StepStartPlugin, EACCES) wrapping ErrUnavailable and
// ErrPluginStart.
func FindPlugin(name, pluginDir string) (string, []string, error) {
	path, places, err := findPlugin(name, pluginDir)
	searched := make([]string, len(places))
	for i, p := range places {
		searched[i] = p.path
	}
	return path, searched, err
}

func findPlugin(name, pluginDir string) (string, []place, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", nil, &InitError{
			Transport: name, Step: StepFindPlugin,
			Cause: fmt.Sprintf("%q is not a transport name", name),
			Hints: []string{"use a plain transport name such as tcp, rdma or ucx (protocol / --protocol); to run a binary at a given path, set LaunchConfig.Path"},
			Err:   ErrInvalidArgument,
		}
	}
	places := searchPlaces(name, pluginDir)
	notExec := -1
	for i := range places {
		st, err := os.Stat(places[i].path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			places[i].note = "cannot stat: " + errnoWords(err)
			continue
		case !st.Mode().IsRegular():
			places[i].note = "not a regular file"
			continue
		case st.Mode().Perm()&0o111 == 0:
			places[i].note = fmt.Sprintf("not executable, mode %v", st.Mode().Perm())
			if notExec < 0 {
				notExec = i
			}
			continue
		}
		return places[i].path, places, nil
	}
	if notExec >= 0 {
		p := places[notExec]
		st, _ := os.Stat(p.path)
		var mode os.FileMode
		if st != nil {
			mode = st.Mode().Perm()
		}
		return "", places, &InitError{
			Transport: name, Step: StepStartPlugin, NativeCode: errnoCode(errEACCES), NativeName: "EACCES",
			Cause: fmt.Sprintf("found %s (%s) but it is not executable (mode %v)", p.path, p.source, mode),
			Hints: []string{
				fmt.Sprintf("make it executable: chmod +x %s", p.path),
				"if it was copied from an archive or artifact store that drops permissions, reinstall it with its mode intact",
			},
			Err: fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginStart),
		}
	}
	return "", places, notFoundError(name, places)
}

func joinPlaces(places []place) string {
	s := make([]string, len(places))
	for i, p := range places {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func notFoundError(name string, places []place) *InitError {
	bin := BinaryPrefix + name
	hints := []string{
		fmt.Sprintf("install the %s transport plugin (%s) into one of these directories, or set plugin_dir (%s) to the directory that holds it",
			name, bin, EnvPluginDir),
	}
	if others := installedPlugins(places); len(others) > 0 {
		h := "transport plugins found in these directories: " + strings.Join(others, ", ")
		if m := closest(name, others); m != "" {
			h += fmt.Sprintf(" (did you mean %q?)", m)
		}
		hints = append(hints, h)
	} else {
		hints = append(hints, "no kvconnect transport plugin was found in any of these directories: is kvconnect installed completely (make build puts them in bin/)?")
	}
	hints = append(hints, "or configure a transport that is installed (protocol), and let the fallback chain move on to it")
	return &InitError{
		Transport: name, Step: StepFindPlugin, NativeCode: errnoCode(errENOENT), NativeName: "ENOENT",
		Cause: fmt.Sprintf("no executable %s found; searched, in order: %s", bin, joinPlaces(places)),
		Hints: hints,
		Err:   fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginNotFound),
	}
}

// installedPlugins lists the transport names of the plugin executables in
// the directories of places.
func installedPlugins(places []place) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range places {
		ents, err := os.ReadDir(filepath.Dir(p.path))
		if err != nil {
			continue
		}
		for _, e := range ents {
			n, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
			if !ok || n == "" || seen[n] {
				continue
			}
			if info, err := e.Info(); err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
				continue
			}
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func closest(name string, names []string) string { return Closest(name, names) }

// Plugin is a running transport plugin process. It implements Transport
// by gRPC; Close also ends the process.
type Plugin struct {
	*grpcClient
	name   string
	path   string
	client *plugin.Client
	proc   *procRunner
	host   *fdSender
	log    *zap.Logger

	exited   chan struct{}
	closeMu  sync.Mutex
	closed   bool
	watchEnd chan struct{}
}

var _ Transport = (*Plugin)(nil)

// Launch finds, starts and handshakes a plugin. Every failure is an
// *InitError naming the transport, the step (StepFindPlugin,
// StepStartPlugin, StepHandshake), the native code where there is one
// (errno, exit status, signal), the cause in words (with the end of the
// plugin's stderr when it said anything) and hints. Its Err wraps
// ErrUnavailable and one of ErrPluginNotFound, ErrPluginStart or
// ErrHandshake, so errors.Is works for both; a canceled ctx gives
// ErrCanceled or ErrTimeout instead of ErrUnavailable. docs/PLUGIN-DIAGNOSES.md
// lists every diagnosis.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	path := cfg.Path
	if path == "" {
		var err error
		if path, _, err = findPlugin(cfg.Name, cfg.PluginDir); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, canceledError(cfg.Name, path, err)
	}
	hostEnd, childEnd, err := fdChannelPair()
	if err != nil {
		code, name := errnoOf(err)
		return nil, &InitError{
			Transport: cfg.Name, Step: StepStartPlugin, NativeCode: code, NativeName: name,
			Cause: fmt.Sprintf("cannot create the socket that carries region file descriptors to %s: %v", path, err),
			Hints: []string{"check the open-files limit of this process (ulimit -n) and of the system (/proc/sys/fs/file-max)"},
			Err:   fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrPluginStart, err),
		}
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{childEnd} // fd 3 in the child
	bindToParent(cmd)
	extraEnv := append([]string{}, cfg.Env...)
	extraEnv = append(extraEnv, EnvFDChannel+"=3", EnvLogLevel+"="+levelName(cfg.Logger))
	if cfg.GRPCMaxMessageSize > 0 {
		extraEnv = append(extraEnv, EnvGRPCMaxMessage+"="+strconv.Itoa(cfg.GRPCMaxMessageSize))
	}
	maxMsg := grpcMaxMessage
	if cfg.GRPCMaxMessageSize > 0 {
		maxMsg = cfg.GRPCMaxMessageSize
	}
	dialOpts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg))}
	proc := &procRunner{ctx: ctx, cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{max: stderrTailMax}}
	log := cfg.Logger.Named("plugin." + cfg.Name)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(),
		// Our own runner, not Cmd, so that we see what the plugin prints on
		// stdout and how its process ended: diagnoses come from those
		// observations, never from go-plugin's error strings.
		RunnerFunc: func(_ hclog.Logger, base *exec.Cmd, socketDir string) (runner.Runner, error) {
			proc.socketDir = socketDir
			// base.Env is the host's environment plus go-plugin's
			// handshake variables; cfg.Env and ours come last and win.
			cmd.Env = append(append([]string{}, base.Env...), extraEnv...)
			return proc, nil
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           &hclogZap{z: log, name: "plugin." + cfg.Name},
		Stderr:           proc.tail,
		StartTimeout:     cfg.StartTimeout,
		GRPCDialOptions:  dialOpts,
		Managed:          false,
	})
	p := &Plugin{name: cfg.Name, path: path, client: client, proc: proc, host: &fdSender{conn: hostEnd}, log: log,
		exited: make(chan struct{}), watchEnd: make(chan struct{})}

	// Cancelling ctx during the start kills the process, which ends the
	// handshake at once.
	startDone, watcherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			proc.cancel()
		case <-startDone:
		}
	}()
	start := time.Now()
	rpc, err := client.Client()
	took := time.Since(start)
	close(startDone)
	<-watcherDone
	childEnd.Close() // the child has its copy now (or never will)
	if err == nil && proc.wasCanceled() {
		err = ctx.Err()
	}
	if err != nil {
		client.Kill() // waits for the process and go-plugin's readers of its output
		p.host.close()
		proc.removeSocketDir()
		return nil, p.startError(ctx, cfg, err, took)
	}
	go p.watch(hostEnd)
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		p.Close(context.Background())
		return nil, &InitError{
			Transport: cfg.Name, Step: StepHandshake,
			Cause: fmt.Sprintf("%s completed the go-plugin handshake but does not serve the %q plugin: %v", path, PluginName, err),
			Hints: []string{"the binary is a go-plugin plugin of another kind, or was built with another kvconnect plugin SDK: install the plugin that ships with this kvconnect version"},
			Err:   fmt.Errorf("%w: %w", ErrUnavailable, ErrHandshake),
		}
	}
	gc := raw.(*grpcClient)
	gc.name = cfg.Name
	gc.fds = p.host
	gc.crashed = p.crashReason
	p.grpcClient = gc
	log.Debug("plugin started", zap.String("path", path), zap.Int("pid", p.Pid()), zap.Duration("took", took))
	return p, nil
}

// stderrTailMax is how much of the end of a plugin's stderr is kept for
// diagnoses; stderrQuoteLines is how many of its last lines a cause quotes.
const (
	stderrTailMax    = 8 << 10
	stderrQuoteLines = 40
)

func canceledError(name, path string, err error) *InitError {
	return &InitError{
		Transport: name, Step: StepStartPlugin,
		Cause: fmt.Sprintf("starting %s was abandoned: %v", path, err),
		Hints: []string{"the caller canceled the start or its deadline passed; allow more time if the plugin is slow to start"},
		Err:   fmt.Errorf("%w: %w", ErrPluginStart, ContextError(err)),
	}
}

// startError diagnoses a plugin that did not come up, from what was
// observed: how exec failed, what the plugin printed on stdout, how its
// process ended, and how long it took. goErr (go-plugin's error) is only
// quoted, never inspected.
func (p *Plugin) startError(ctx context.Context, cfg LaunchConfig, goErr error, took time.Duration) *InitError {
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
		return &InitError{
			Transport: cfg.Name, Step: StepStartPlugin, NativeCode: code, NativeName: name,
			Cause: fmt.Sprintf("cannot prepare to start %s: %v", p.path, goErr),
			Hints: []string{fmt.Sprintf("the plugin's socket directory is created in the temporary directory %s: check that it exists, is writable and is not full (or point TMPDIR elsewhere)", os.TempDir())},
			Err:   fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginStart),
		}
	}
	st := r.state()
	line, complete := r.stdout.firstLine()
	tail := lastLines(r.tail.String(), stderrQuoteLines)
	ie := &InitError{Transport: cfg.Name, Step: StepHandshake, Err: fmt.Errorf("%w: %w", ErrUnavailable, ErrHandshake)}
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
	case st != nil && st.ExitCode() == ExitCookieMismatch:
		ie.Cause = withTail(fmt.Sprintf("%s was built with a kvconnect plugin SDK whose handshake cookie differs from this host's (%s=%s): it refused the handshake",
			p.path, Handshake.MagicCookieKey, Handshake.MagicCookieValue))
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
		if hs.version > APIVersion {
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
		ie.Step = StepStartPlugin
		ie.Err = fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginStart)
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
		return handshakeLine{}, fmt.Errorf("%d fields, want at least 4: %w", len(parts), ErrProtocol)
	}
	var h handshakeLine
	var err error
	if h.core, err = strconv.Atoi(parts[0]); err != nil {
		return h, fmt.Errorf("core protocol %q: %w", parts[0], ErrProtocol)
	}
	if h.version, err = strconv.Atoi(parts[1]); err != nil {
		return h, fmt.Errorf("protocol version %q: %w", parts[1], ErrProtocol)
	}
	h.protocol = plugin.ProtocolNetRPC // go-plugin's default when the field is absent
	if len(parts) >= 5 && parts[4] != "" {
		h.protocol = plugin.Protocol(parts[4])
	}
	return h, nil
}

func acceptsVersion(v int) bool {
	_, ok := versionedPlugins()[v]
	return ok
}

func acceptedVersions() []string {
	var out []string
	for v := range versionedPlugins() {
		out = append(out, strconv.Itoa(v))
	}
	return out
}

// exitHints says what to do about a plugin that exited before its
// handshake, from how it exited.
func exitHints(path string, st *os.ProcessState) []string {
	run := fmt.Sprintf("run it by hand to see everything it says: %s=%s %s", Handshake.MagicCookieKey, Handshake.MagicCookieValue, path)
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
func execError(name, path string, err error) *InitError {
	ie := &InitError{Transport: name, Step: StepStartPlugin, Err: fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginStart)}
	ie.NativeCode, ie.NativeName = errnoOf(err)
	var ee *exec.Error
	if errors.As(err, &ee) {
		ie.Step = StepFindPlugin
		ie.Err = fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginNotFound)
		ie.Cause = fmt.Sprintf("%s: not found on PATH (%s)", ee.Name, os.Getenv("PATH"))
		ie.Hints = []string{"give the plugin's full path, or install it where FindPlugin looks (plugin_dir, " + EnvPluginDir + ", beside the executable, PATH)"}
		return ie
	}
	st, statErr := os.Stat(path)
	errno, _ := errnoValue(err)
	switch {
	case errno == errENOENT && statErr != nil:
		ie.Step = StepFindPlugin
		ie.Err = fmt.Errorf("%w: %w", ErrUnavailable, ErrPluginNotFound)
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

// watch closes p.exited when the plugin process goes away: its end of the
// fd channel closes then and our read returns.
func (p *Plugin) watch(c interface{ Read([]byte) (int, error) }) {
	defer close(p.watchEnd)
	var b [8]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			break
		}
	}
	close(p.exited)
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if !closed {
		p.log.Error("transport plugin process exited unexpectedly", zap.String("path", p.path))
	}
}

// crashReason reports whether the plugin process has gone, waiting briefly
// for the exit to be noticed (a broken gRPC stream usually comes first).
// The sentinel is ErrClosed when the host closed the plugin itself,
// ErrTransportCrashed when the process died on its own.
func (p *Plugin) crashReason() (string, error) {
	select {
	case <-p.exited:
	case <-time.After(500 * time.Millisecond):
		return "", nil
	}
	p.closeMu.Lock()
	closed := p.closed
	p.closeMu.Unlock()
	if closed {
		return "the plugin was closed", ErrClosed
	}
	why := fmt.Sprintf("the plugin process (%s) exited", p.path)
	if st := p.proc.waitState(200 * time.Millisecond); st != nil {
		_, _, ended := exitInfo(st)
		why = fmt.Sprintf("the plugin process (%s) %s", p.path, ended)
	}
	return why, ErrTransportCrashed
}

// Info asks the plugin about its transport. If the plugin process dies
// meanwhile, the error is an *InitError like Init's.
func (p *Plugin) Info(ctx context.Context) (Info, error) {
	info, err := p.grpcClient.Info(ctx)
	if err != nil && errors.Is(err, ErrTransportCrashed) {
		return info, p.crashError("info", err)
	}
	return info, err
}

// Init brings the plugin's transport up. When the plugin process dies
// during Init, the error is an *InitError with step StepInitPluginCrash,
// the process's exit status or signal, the end of its stderr, and Err
// wrapping ErrUnavailable and ErrTransportCrashed.
func (p *Plugin) Init(ctx context.Context, req InitRequest) (InitResult, error) {
	res, err := p.grpcClient.Init(ctx, req)
	if err != nil && errors.Is(err, ErrTransportCrashed) {
		return res, p.crashError("init", err)
	}
	return res, err
}

func (p *Plugin) crashError(call string, err error) *InitError {
	ie := &InitError{
		Transport: p.name, Step: StepInitPluginCrash,
		Err: fmt.Errorf("%w: %w", ErrUnavailable, ErrTransportCrashed),
	}
	var cause string
	if st := p.proc.waitState(2 * time.Second); st != nil {
		var ended string
		ie.NativeCode, ie.NativeName, ended = exitInfo(st)
		cause = fmt.Sprintf("the plugin process (%s) %s during %s", p.path, ended, call)
	} else {
		cause = fmt.Sprintf("the connection to the plugin process (%s) broke during %s and the process did not exit: %v", p.path, call, err)
	}
	if tail := lastLines(p.StderrTail(), stderrQuoteLines); tail != "" {
		cause += "; its stderr ends with:\n" + indent(tail)
	}
	ie.Cause = cause
	ie.Hints = []string{
		"this is a bug in the plugin or in a library or driver it calls: report it to the plugin's author with the stderr above",
		"meanwhile, configure a fallback transport (fallback) or another protocol",
	}
	return ie
}

// StderrTail returns the end of what the plugin process wrote on stderr
// (up to 8 KiB, trimmed), for diagnoses. Complete once the process has
// exited.
func (p *Plugin) StderrTail() string { return p.proc.tail.String() }

// Exited is closed when the plugin process has gone.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

// Pid is the plugin process id, or 0 if unknown.
func (p *Plugin) Pid() int { return p.proc.pidValue() }

// Path is the plugin binary that was started.
func (p *Plugin) Path() string { return p.path }

// Close asks the transport to close, then ends the plugin process and
// releases the fd channel. It is idempotent; when it returns the process
// has been reaped.
func (p *Plugin) Close(ctx context.Context) error {
	p.closeMu.Lock()
	if p.closed {
		p.closeMu.Unlock()
		return nil
	}
	p.closed = true
	p.closeMu.Unlock()
	var err error
	if p.grpcClient != nil {
		select {
		case <-p.exited:
		default:
			err = p.grpcClient.Close(ctx)
			if errors.Is(err, ErrTransportCrashed) {
				err = nil // it is going away either way
			}
		}
	}
	p.client.Kill()
	p.host.close()
	<-p.watchEnd
	p.proc.removeSocketDir()
	return err
}

func levelName(l *zap.Logger) string {
	for _, lvl := range []zapcore.Level{zapcore.DebugLevel, zapcore.InfoLevel, zapcore.WarnLevel} {
		if l.Core().Enabled(lvl) {
			return lvl.String()
		}
	}
	return "error"
}

// procRunner runs the plugin process for go-plugin (runner.Runner) and
// records what diagnoses need: the exec error, the first bytes of stdout,
// the end of stderr, whether the host killed the process, and how it ended.
type procRunner struct {
	ctx       context.Context
	cmd       *exec.Cmd
	socketDir string
	stdout    *recorder
	stderr    io.ReadCloser
	tail      *tailBuffer
	done      chan struct{} // closed once the process has been waited for

	mu        sync.Mutex
	attempted bool // go-plugin called Start
	pid       int
	execErr   error
	killed    bool // the host sent SIGKILL (go-plugin on a failed handshake, Close, or a canceled ctx)
	canceled  bool
	st        *os.ProcessState
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempted = true
	if err := r.ctx.Err(); err != nil {
		r.canceled = true
		return err
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		r.execErr = err
		return err
	}
	if r.stderr, err = r.cmd.StderrPipe(); err != nil {
		r.execErr = err
		return err
	}
	r.stdout = &recorder{r: out, max: 1024}
	if err := r.cmd.Start(); err != nil {
		r.execErr = err
		return err
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.mu.Lock()
	r.st = r.cmd.ProcessState
	r.mu.Unlock()
	close(r.done)
	return err
}

// exitGrace is how long Kill lets a plugin whose stdout has closed finish
// exiting on its own, so that its own exit status is what gets diagnosed.
const exitGrace = 2 * time.Second

func (r *procRunner) Kill(context.Context) error {
	r.mu.Lock()
	out := r.stdout
	r.mu.Unlock()
	// A closed stdout usually means the process is exiting (tearing down
	// a large address space can take a while): let it finish rather than
	// kill it and lose how it ended.
	if out != nil && out.sawEOF() {
		t := time.NewTimer(exitGrace)
		select {
		case <-r.done:
		case <-t.C:
		}
		t.Stop()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killLocked()
}

func (r *procRunner) killLocked() error {
	if r.pid == 0 || r.st != nil {
		return nil
	}
	r.killed = true
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// cancel kills the process because the caller's ctx ended.
func (r *procRunner) cancel() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.canceled = true
	_ = r.killLocked()
}

func (r *procRunner) Stdout() io.ReadCloser                            { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser                            { return r.stderr }
func (r *procRunner) Name() string                                     { return r.cmd.Path }
func (r *procRunner) Diagnose(context.Context) string                  { return "" }
func (r *procRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }

func (r *procRunner) ID() string {
	if pid := r.pidValue(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}

func (r *procRunner) pidValue() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

func (r *procRunner) startError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execErr
}

func (r *procRunner) wasCanceled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.canceled
}

func (r *procRunner) wasAttempted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempted
}

func (r *procRunner) wasKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}

// state is how the process ended, or nil while it runs (or never ran).
func (r *procRunner) state() *os.ProcessState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// waitState waits up to d for the process to be reaped and returns how it
// ended, or nil.
func (r *procRunner) waitState(d time.Duration) *os.ProcessState {
	if r.pidValue() == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
	}
	return r.state()
}

func (r *procRunner) removeSocketDir() {
	if r.socketDir != "" {
		os.RemoveAll(r.socketDir)
	}
}

// recorder passes a plugin's stdout to go-plugin and keeps its first max
// bytes: the handshake line, or whatever a program that is not a plugin
// printed instead.
type recorder struct {
	r   io.ReadCloser
	max int

	mu  sync.Mutex
	buf []byte
	eof bool
}

func (c *recorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.mu.Lock()
	if room := c.max - len(c.buf); n > 0 && room > 0 {
		c.buf = append(c.buf, p[:min(n, room)]...)
	}
	if err != nil {
		c.eof = true
	}
	c.mu.Unlock()
	return n, err
}

// sawEOF reports whether reading stdout ended (the plugin closed it,
// usually by exiting).
func (c *recorder) sawEOF() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eof
}

func (c *recorder) Close() error { return c.r.Close() }

// String is everything recorded.
func (c *recorder) String() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// firstLine is the first line printed (trimmed) and whether it ended.
func (c *recorder) firstLine() (string, bool) {
	s := c.String()
	line, _, complete := strings.Cut(s, "\n")
	return strings.TrimSpace(line), complete
}

// Errnos the diagnoses name (the syscall package has them on every
// platform).
const (
	errENOENT  = syscall.ENOENT
	errEACCES  = syscall.EACCES
	errENOEXEC = syscall.ENOEXEC
	errETXTBSY = syscall.ETXTBSY
)

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EINTR: "EINTR", syscall.EIO: "EIO",
	syscall.E2BIG: "E2BIG", syscall.ENOEXEC: "ENOEXEC", syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM",
	syscall.EACCES: "EACCES", syscall.EFAULT: "EFAULT", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR",
	syscall.EINVAL: "EINVAL", syscall.ENFILE: "ENFILE", syscall.EMFILE: "EMFILE", syscall.ETXTBSY: "ETXTBSY",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ELOOP: "ELOOP", syscall.ENOSYS: "ENOSYS", syscall.ENOSPC: "ENOSPC",
	syscall.EROFS: "EROFS",
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM",
	syscall.SIGTERM: "SIGTERM",
}

func errnoCode(e syscall.Errno) int64 { return int64(e) }

func errnoValue(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	ok := errors.As(err, &e)
	return e, ok
}

// errnoOf returns the errno err wraps and its symbolic name, or 0, "".
func errnoOf(err error) (int64, string) {
	if e, ok := errnoValue(err); ok {
		return int64(e), errnoNames[e]
	}
	return 0, ""
}

// errnoWords is err's errno in words ("permission denied"), or err.
func errnoWords(err error) string {
	if e, ok := errnoValue(err); ok {
		return e.Error()
	}
	return err.Error()
}

// waitStatus is what exitInfo needs of os.ProcessState.Sys().
type waitStatus interface {
	Signaled() bool
	Signal() syscall.Signal
	CoreDump() bool
}

// exitInfo describes how a process ended: the native code and name for an
// InitError (exit status, or signal number and name) and the same in words.
func exitInfo(st *os.ProcessState) (code int64, name, words string) {
	if ws, ok := st.Sys().(waitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		name = signalNames[sig]
		if name == "" {
			name = "signal " + strconv.Itoa(int(sig))
		}
		words = fmt.Sprintf("was killed by %s (%v)", name, sig)
		if ws.CoreDump() {
			words += ", core dumped"
		}
		return int64(sig), name, words
	}
	c := st.ExitCode()
	if c == 0 {
		return 0, "exit status 0", "exited with status 0"
	}
	return int64(c), "exit status", fmt.Sprintf("exited with status %d", c)
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(waitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// interpreter is the program interpreter a binary asks the kernel for: the
// ELF PT_INTERP (the dynamic loader) or a script's #! program; "" if none.
func interpreter(path string) string {
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
				if err == nil {
					return strings.TrimRight(string(b), "\x00")
				}
			}
		}
		return ""
	}
	head := fileHead(path, 256)
	if rest, ok := bytes.CutPrefix(head, []byte("#!")); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		if f := strings.Fields(string(line)); len(f) > 0 {
			return f[0]
		}
	}
	return ""
}

func fileHead(path string, n int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, n)
	m, _ := io.ReadFull(f, b)
	return b[:m]
}

// elfMachines maps GOARCH to the ELF machine of binaries built for it.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "386": elf.EM_386, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64": elf.EM_PPC64, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
	"loong64": elf.EM_LOONGARCH, "mips": elf.EM_MIPS, "mipsle": elf.EM_MIPS, "mips64": elf.EM_MIPS, "mips64le": elf.EM_MIPS,
}

// describeBinary says what kind of file path is, for a binary the kernel
// refused to run (ENOEXEC).
func describeBinary(path string) string {
	head := fileHead(path, 64)
	switch {
	case len(head) == 0:
		return "the file is empty"
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Sprintf("a damaged ELF file (%v)", err)
		}
		defer f.Close()
		bits := 64
		if f.Class == elf.ELFCLASS32 {
			bits = 32
		}
		want, known := elfMachines[runtime.GOARCH]
		switch {
		case f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN:
			return fmt.Sprintf("an ELF %v, not an executable", f.Type)
		case known && f.Machine != want:
			return fmt.Sprintf("an ELF %d-bit executable for %v, but this host is %s (%v)", bits, f.Machine, hostPlatform(), want)
		}
		return fmt.Sprintf("an ELF %d-bit executable for %v that the kernel still refused (truncated or corrupt?)", bits, f.Machine)
	case bytes.HasPrefix(head, []byte("#!")):
		return "a script whose interpreter cannot be run"
	case bytes.HasPrefix(head, []byte("MZ")):
		return "a Windows (PE) executable"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "a macOS (Mach-O) executable"
	case utf8.Valid(head) && !bytes.ContainsRune(head, 0):
		line, _, _ := bytes.Cut(head, []byte("\n"))
		return fmt.Sprintf("a text file without a #! line (it starts with %q)", line)
	}
	return fmt.Sprintf("neither an ELF executable nor a script (it starts with bytes % x)", head[:min(len(head), 8)])
}

func hostOS() string       { return runtime.GOOS }
func hostArch() string     { return runtime.GOARCH }
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }
