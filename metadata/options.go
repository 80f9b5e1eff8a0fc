package metadata

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/errdefs"
)

// Defaults for zero Options fields.
const (
	DefaultTTL            = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	// MinTTL is the shortest TTL accepted. etcd raises a lease's TTL to its
	// own minimum (1.5 election timeouts, 2 s with etcd's defaults);
	// Status.TTL shows what was granted.
	MinTTL = time.Second
)

// Options configures Open.
type Options struct {
	// URL is the connection string (see Parse). Required.
	URL string
	// ClusterID is Mooncake's MC_METADATA_CLUSTER_ID: keys live under
	// mooncake/<cluster>/ instead of mooncake/.
	ClusterID string
	// TTL is how long this node's keys outlive it: the etcd lease TTL, the
	// Redis expiry, the expiry an HTTP metadata server of kvconnect's
	// gives them. They are renewed every TTL/3. Default 10s, at least 1s.
	TTL time.Duration
	// ConnectTimeout bounds Open and each request to the service. Default 10s.
	ConnectTimeout time.Duration
	// RefreshInterval is how often the Redis and HTTP backends re-read
	// the descriptors they cached (so a peer's descriptor is at most this
	// old and Gone fires at most this long after its key expired).
	// Default TTL/3. etcd pushes changes through a watch and ignores it.
	RefreshInterval time.Duration
	// Username and Password authenticate: etcd's user and password, the
	// Redis ACL user and password (Mooncake's MC_REDIS_PASSWORD), HTTP
	// basic authentication. Credentials in the URL count when these are
	// empty; both set and different is an error.
	Username string
	Password Secret
	// RedisDB is the Redis database index (Mooncake's MC_REDIS_DB_INDEX);
	// a /db in the URL means the same.
	RedisDB int
	// TLS names the CA bundle that verifies the server and the client
	// certificate and key: for etcd (any file set turns TLS on), https://
	// and rediss:// (system roots without a CA file).
	TLS TLSFiles
	// Log receives state changes (service lost, back, republished), once
	// each, not per retry. nil logs nothing.
	Log *zap.Logger
}

// Secret is a string that does not print: fmt shows "(hidden)" (""
// when empty) and JSON "(hidden)", so logging a struct that holds one does
// not leak it. string(s) is the secret itself.
type Secret string

// String returns "(hidden)", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "(hidden)"
}

// GoString is String for %#v.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalJSON encodes String.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// TLSFiles names PEM files.
type TLSFiles struct {
	CAFile   string // CA bundle that verifies the server
	CertFile string // client certificate (with KeyFile)
	KeyFile  string // client key
}

// Set says whether any file is named.
func (f TLSFiles) Set() bool { return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" }

// Config loads the files into a tls.Config. Errors wrap
// errdefs.ErrInvalidArgument and name the file.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w: CA file: %w", errdefs.ErrInvalidArgument, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("metadata: %w: CA file %s holds no PEM certificate", errdefs.ErrInvalidArgument, f.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w: client certificate %s with key %s: %w", errdefs.ErrInvalidArgument, f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.CertFile != "":
		return nil, fmt.Errorf("metadata: %w: client certificate %s given without its key file", errdefs.ErrInvalidArgument, f.CertFile)
	case f.KeyFile != "":
		return nil, fmt.Errorf("metadata: %w: client key %s given without its certificate file", errdefs.ErrInvalidArgument, f.KeyFile)
	}
	return cfg, nil
}

// settings is Options checked, with defaults applied and the URL parsed.
type settings struct {
	Options
	target Target
	keys   Keys
	renew  time.Duration // TTL/3
	log    *zap.Logger
}

// resolveOptions checks o and applies the defaults. Errors wrap
// errdefs.ErrInvalidArgument.
func resolveOptions(o Options) (*settings, error) {
	t, err := Parse(o.URL)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*settings, error) {
		return nil, fmt.Errorf("metadata: %w: %s: %s", errdefs.ErrInvalidArgument, t, fmt.Sprintf(format, args...))
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < MinTTL {
		return bad("TTL %s is shorter than %s", o.TTL, MinTTL)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ConnectTimeout < 0 || o.RefreshInterval < 0 {
		return bad("negative timeout or interval")
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = o.TTL / 3
	}
	switch {
	case o.Username == "":
		o.Username = t.Username
	case t.Username != "" && t.Username != o.Username:
		return bad("user %q in the URL and user %q in the options differ", t.Username, o.Username)
	}
	switch {
	case o.Password == "":
		o.Password = Secret(t.Password)
	case t.Password != "" && t.Password != string(o.Password):
		return bad("the password in the URL and the one in the options differ")
	}
	if t.HasDB {
		if o.RedisDB != 0 && o.RedisDB != t.DB {
			return bad("database %d in the URL and RedisDB %d differ", t.DB, o.RedisDB)
		}
		o.RedisDB = t.DB
	}
	if o.RedisDB < 0 {
		return bad("RedisDB %d is negative", o.RedisDB)
	}
	if t.Backend == Etcd && o.Password != "" && o.Username == "" {
		return bad("a password without a user name: etcd authenticates a user")
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &settings{Options: o, target: t, keys: NewKeys(o.ClusterID), renew: o.TTL / 3,
		log: log.Named("metadata").With(zap.Stringer("service", t))}, nil
}
