package metadata

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvconnect/kvconnect/errdefs"
)

// P2P is the metadata mode without a service: peers exchange segment
// descriptors over their RPC ports (Mooncake's P2PHANDSHAKE).
const P2P = "P2PHANDSHAKE"

// Backend names a kind of metadata service.
type Backend string

// The metadata services.
const (
	Etcd  Backend = "etcd"
	HTTP  Backend = "http"
	Redis Backend = "redis"
)

// Allowed says which connection strings Parse accepts, for error texts.
const Allowed = "P2PHANDSHAKE, etcd://host:port[,host:port...], a bare host:port[,host:port...] (etcd, as in Mooncake), " +
	"http://host:port/path, https://host:port/path, redis://[user:password@]host:port[/db] or rediss://[user:password@]host:port[/db]"

// maxURL bounds a connection string, as given and as written back
// (Target.String, percent-escaped).
const maxURL = 4096

// defaultRedisPort is used when a redis:// URL has no port.
const defaultRedisPort = "6379"

// Target is a parsed metadata connection string.
type Target struct {
	// Backend is the kind of service.
	Backend Backend
	// Endpoints are the servers: every etcd member as host:port, the
	// Redis server as host:port, the HTTP server's host[:port].
	Endpoints []string
	// URL is the HTTP metadata URL requests go to (Mooncake's rule: the
	// connection string, to which ?key=<escaped key> is appended), without
	// user information. Empty for etcd and Redis.
	URL string
	// TLS is set by https:// and rediss://. etcd uses TLS when
	// Options.TLS names a file.
	TLS bool
	// Username and Password come from the URL's user information
	// (redis://user:password@host, http://user:password@host).
	Username, Password string
	// DB is the Redis database of redis://host:port/db; HasDB says the
	// URL named one.
	DB    int
	HasDB bool
}

// ParseError is a connection string Parse rejects. It wraps
// errdefs.ErrInvalidArgument.
type ParseError struct {
	Value  string // the string, password hidden
	Reason string // what is wrong with it
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("metadata: %v: connection string %q: %s; want %s", errdefs.ErrInvalidArgument, e.Value, e.Reason, Allowed)
}

// Unwrap returns errdefs.ErrInvalidArgument.
func (e *ParseError) Unwrap() error { return errdefs.ErrInvalidArgument }

// IsP2P says whether s is the P2P handshake mode (no metadata service).
func IsP2P(s string) bool { return strings.TrimSpace(s) == P2P }

// Parse reads a metadata connection string as Mooncake does:
// etcd://host:port[,host:port...] (also ; between endpoints), a bare
// host:port[,host:port...] (etcd), http:// and https:// URLs (Mooncake's
// HTTP metadata protocol; the whole string is the URL prefix),
// redis://[user:password@]host[:port][/db] and rediss:// (TLS). Hosts
// are ASCII (an internationalised name in its xn-- form), and the string
// is at most 4096 bytes, escaped or not. Errors
// wrap errdefs.ErrInvalidArgument and name the value and what is allowed.
// P2PHANDSHAKE is not a service and is an error here (see IsP2P). Errors
// are *ParseError.
func Parse(s string) (Target, error) {
	t, err := parse(s)
	if err == nil && len(t.format(false)) > maxURL {
		// Bytes a URL escapes (in a path or a password) take three
		// each: the target written back must parse too.
		return Target{}, &ParseError{Value: redactString(s), Reason: fmt.Sprintf("longer than %d bytes once percent-escaped", maxURL)}
	}
	return t, err
}

func parse(s string) (Target, error) {
	raw := s
	s = strings.TrimSpace(s)
	bad := func(reason string) (Target, error) {
		return Target{}, &ParseError{Value: redactString(raw), Reason: reason}
	}
	switch {
	case s == "":
		return bad("empty")
	case len(s) > maxURL:
		return bad(fmt.Sprintf("longer than %d bytes", maxURL))
	case s == P2P:
		return bad("P2PHANDSHAKE means no metadata service: peers exchange segment descriptors over their RPC ports")
	case strings.EqualFold(s, P2P):
		return bad(`the P2P mode is spelled "P2PHANDSHAKE"`)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	i := strings.Index(s, "://")
	if i < 0 {
		eps, reason := parseEndpoints(s)
		if reason != "" {
			return bad(reason + " (a string without a scheme is a list of etcd endpoints, as in Mooncake)")
		}
		return Target{Backend: Etcd, Endpoints: eps}, nil
	}
	if strayAt(s[i+3:]) {
		// user:pa/ss@host: url.Parse would take "user:pa" for the host,
		// and a reason naming the host or port would show the password.
		return bad("an '@' after the end of the host (its first '/', '?' or '#'): percent-encode '/', '?', '#' and '@' in a user name, password or path (%2F, %3F, %23, %40)")
	}
	switch scheme := strings.ToLower(s[:i]); scheme {
	case "etcd":
		eps, reason := parseEndpoints(s[i+3:])
		if reason != "" {
			return bad(reason)
		}
		return Target{Backend: Etcd, Endpoints: eps}, nil
	case "http", "https":
		return parseHTTP(s, bad)
	case "redis", "rediss":
		return parseRedis(s, bad)
	default:
		return bad(fmt.Sprintf("unknown scheme %q", scheme))
	}
}

// parseEndpoints reads host:port[,host:port...] with , or ; between
// endpoints; the reason is empty when it is well formed.
func parseEndpoints(list string) ([]string, string) {
	if strings.TrimSpace(list) == "" {
		return nil, "no endpoints"
	}
	parts := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ';' })
	if n := strings.Count(list, ",") + strings.Count(list, ";") + 1; n != len(parts) {
		return nil, "an empty endpoint between separators"
	}
	eps := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if strings.Contains(p, "@") {
			// Not quoted: what precedes the '@' is a user and a password.
			return nil, "an endpoint holds user information (user:password@host): etcd's user and password are set with metadata_username and metadata_password (KVCONNECT_METADATA_USERNAME, KVCONNECT_METADATA_PASSWORD), not in the connection string"
		}
		if strings.Contains(p, "://") {
			return nil, fmt.Sprintf("endpoint %q has a scheme: write etcd://host:port,host:port", p)
		}
		if reason := checkHostPort(p, true); reason != "" {
			return nil, fmt.Sprintf("endpoint %q: %s", p, reason)
		}
		eps = append(eps, p)
	}
	return eps, ""
}

// checkHostPort checks host:port (port required when needPort).
func checkHostPort(hp string, needPort bool) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		if needPort {
			return "not host:port"
		}
		host, port = hp, ""
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
			if net.ParseIP(host) == nil {
				return fmt.Sprintf("host %q is not an IPv6 address", host)
			}
		} else if strings.Contains(host, ":") {
			return "not host:port"
		}
	}
	if host == "" {
		return "no host"
	}
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return fmt.Sprintf("host %q is not ASCII (write an internationalised name in its xn-- form)", host)
		}
	}
	if strings.ContainsAny(host, " ,;/\\@?#%\"'{}[]") {
		return fmt.Sprintf("host %q is not a host name or IP address", host)
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return fmt.Sprintf("host %q is not an IPv6 address", host)
	}
	if port == "" {
		if needPort {
			return "no port"
		}
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return fmt.Sprintf("port %q is not a number between 1 and 65535", port)
	}
	return ""
}

func parseHTTP(s string, bad func(string) (Target, error)) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL: " + trimURLError(err))
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host")
	}
	if u.RawQuery != "" || u.ForceQuery {
		return bad("a query: the client appends ?key=<escaped key> itself")
	}
	if u.Fragment != "" {
		return bad("a fragment")
	}
	if reason := checkHostPort(u.Host, false); reason != "" {
		return bad(reason)
	}
	t := Target{Backend: HTTP, Endpoints: []string{u.Host}, TLS: strings.EqualFold(u.Scheme, "https")}
	if u.User != nil {
		t.Username = u.User.Username()
		t.Password, _ = u.User.Password()
		u.User = nil
	}
	u.Scheme = strings.ToLower(u.Scheme)
	t.URL = u.String()
	return t, nil
}

func parseRedis(s string, bad func(string) (Target, error)) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL: " + trimURLError(err))
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return bad("a query or fragment: Redis settings come from metadata_password and metadata_redis_db")
	}
	if reason := checkHostPort(u.Host, false); reason != "" {
		return bad(reason)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(strings.Trim(u.Hostname(), "[]"), defaultRedisPort)
	}
	t := Target{Backend: Redis, Endpoints: []string{host}, TLS: strings.EqualFold(u.Scheme, "rediss")}
	if u.User != nil {
		t.Username = u.User.Username()
		t.Password, _ = u.User.Password()
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p[0] == '+' || (len(p) > 1 && p[0] == '0') {
			return bad(fmt.Sprintf("database %q is not a number, 0 or more (redis://host:port/db)", p))
		}
		t.DB, t.HasDB = n, true
	}
	return t, nil
}

// trimURLError drops the URL (which may hold a password) from a url.Parse
// error.
func trimURLError(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return err.Error()
}

// String returns the connection string with any password replaced by
// "xxxxx", fit for logs.
func (t Target) String() string { return t.format(true) }

// format writes the target back as a connection string Parse reads into
// the same Target.
func (t Target) format(redact bool) string {
	pass := t.Password
	if redact && pass != "" {
		pass = "xxxxx"
	}
	userinfo := func() *url.Userinfo {
		switch {
		case pass != "":
			return url.UserPassword(t.Username, pass)
		case t.Username != "":
			return url.User(t.Username)
		}
		return nil
	}
	switch t.Backend {
	case Etcd:
		return "etcd://" + strings.Join(t.Endpoints, ",")
	case HTTP:
		u, err := url.Parse(t.URL)
		if err != nil {
			return t.URL
		}
		u.User = userinfo()
		return u.String()
	case Redis:
		u := url.URL{Scheme: "redis", Host: strings.Join(t.Endpoints, ","), User: userinfo()}
		if t.TLS {
			u.Scheme = "rediss"
		}
		if t.HasDB {
			u.Path = "/" + strconv.Itoa(t.DB)
		}
		return u.String()
	}
	return ""
}

// Redact hides the password of a connection string
// (redis://:xxxxx@host), for logs and error texts; it does not need to
// parse.
func Redact(s string) string { return redactString(s) }

// strayAt says whether rest (a connection string after its "://") has
// an '@' past the end of its authority (the first '/', '?' or '#') and
// none before: a password holding one of those, not percent-encoded.
func strayAt(rest string) bool {
	j := strings.IndexAny(rest, "/?#")
	return j >= 0 && !strings.Contains(rest[:j], "@") && strings.Contains(rest[j:], "@")
}

// redactEndpoints hides the password of each user:password@host:port in
// a bare endpoint list (etcd's, as Mooncake takes it), which kvconnect
// refuses but must not repeat.
func redactEndpoints(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		end := strings.IndexAny(s, ",;")
		if end < 0 {
			end = len(s)
		}
		tok := s[:end]
		if at := strings.LastIndex(tok, "@"); at >= 0 {
			if user, _, hasPass := strings.Cut(tok[:at], ":"); hasPass {
				tok = user + ":xxxxx" + tok[at:]
			}
		}
		b.WriteString(tok)
		if end < len(s) {
			b.WriteByte(s[end])
			end++
		}
		s = s[end:]
	}
	return b.String()
}

// redactString hides the password of a URL-like connection string for
// error texts; strings without one are returned as they are. A password
// holding '/', '?' or '#' (not percent-encoded, so the URL does not
// parse as meant) is hidden too: the user information then runs to the
// last '@'.
func redactString(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return redactEndpoints(s)
	}
	authority := s[i+3:]
	if j := strings.IndexAny(authority, "/?#"); j >= 0 && !strayAt(authority) {
		authority = authority[:j]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return s
	}
	info := authority[:at]
	user, _, hasPass := strings.Cut(info, ":")
	if !hasPass {
		return s
	}
	return s[:i+3] + user + ":xxxxx" + s[i+3+at:]
}
