package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/metadata"
	"github.com/kvconnect/kvconnect/units"
)

func init() { subcommands = append(subcommands, newMetadataServerCommand) }

func newMetadataServerCommand() *cobra.Command {
	var listen, path, maxBody, maxBytes string
	var ttl, maxTTL time.Duration
	cmd := &cobra.Command{
		Use:   "metadata-server",
		Short: "Serve Mooncake's HTTP metadata protocol, with entries that expire unless refreshed",
		Long: `metadata-server is an HTTP metadata server for nodes started with
--metadata http://host:port/path, kvconnect's and Mooncake's alike. It speaks
Mooncake's protocol (GET, PUT and DELETE on <path>?key=<url-escaped key>,
JSON bodies, 404 for a missing key) and keeps entries in memory.

An entry expires --ttl after its last PUT unless the PUT says otherwise:
kvconnect nodes send their own TTL (metadata_ttl) and refresh their entries,
so a node that dies vanishes. Mooncake nodes never refresh: give them
--ttl 0 (never expire) if they share this server.

It prints {"address": ..., "url": ...} as a JSON line on stdout once it
listens, and serves until SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 0 {
				return fmt.Errorf("--ttl %s: want a duration, 0 for entries that never expire", ttl)
			}
			limit, err := units.ParseSize(maxBody)
			if err != nil || limit == 0 || limit > 1<<30 {
				return fmt.Errorf("--max-body %q: want a size between 1 byte and 1GiB, like 1MiB", maxBody)
			}
			held, err := units.ParseSize(maxBytes)
			if err != nil || held == 0 || held > 1<<40 {
				return fmt.Errorf("--max-bytes %q: want a size between 1 byte and 1TiB, like 1GiB", maxBytes)
			}
			if maxTTL <= 0 {
				return fmt.Errorf("--max-ttl %s: want a positive duration, like 24h", maxTTL)
			}
			if !strings.HasPrefix(path, "/") {
				return fmt.Errorf("--path %q: want a path starting with /, like /metadata", path)
			}
			log, err := loadLogging(cmd)
			if err != nil {
				return err
			}
			defer log.Sync()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runMetadataServer(ctx, cmd, log, listen, path, ttl, metadata.ServerOptions{MaxBody: int64(limit), MaxBytes: int64(held), MaxTTL: maxTTL})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "host:port to listen on (Mooncake's reference server uses :8080); port 0 picks a free one")
	cmd.Flags().StringVar(&path, "path", metadata.DefaultServerPath, "the one URL path served")
	cmd.Flags().DurationVar(&ttl, "ttl", metadata.DefaultServerTTL, "expiry of an entry after its last PUT when the client does not send its own; 0 = never")
	cmd.Flags().StringVar(&maxBody, "max-body", "1MiB", "largest PUT body accepted (larger: 413)")
	cmd.Flags().StringVar(&maxBytes, "max-bytes", "1GiB", "most the server holds, keys and values together (a PUT past it: 507)")
	cmd.Flags().DurationVar(&maxTTL, "max-ttl", metadata.DefaultServerMaxTTL, "longest TTL a client may ask for (longer: 400)")
	return cmd
}

func runMetadataServer(ctx context.Context, cmd *cobra.Command, log *zap.Logger, listen, path string, ttl time.Duration, limits metadata.ServerOptions) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_, port, _ := net.SplitHostPort(listen)
		return fmt.Errorf("metadata-server: cannot listen on %s (port %s): %w", listen, port, errors.Unwrap(err))
	}
	serverTTL := ttl
	if ttl == 0 {
		serverTTL = -1 // never
	}
	limits.Path, limits.TTL = path, serverTTL
	srv := metadata.NewServer(limits)
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	addr := ln.Addr().String()
	out := struct {
		Address  string `json:"address"`
		URL      string `json:"url"`
		Path     string `json:"path"`
		TTL      string `json:"ttl"`
		MaxBody  int64  `json:"max_body"`
		MaxBytes int64  `json:"max_bytes"`
		MaxTTL   string `json:"max_ttl"`
	}{Address: addr, URL: "http://" + reachable(addr) + path, Path: path, TTL: ttl.String(), MaxBody: limits.MaxBody,
		MaxBytes: limits.MaxBytes, MaxTTL: limits.MaxTTL.String()}
	if ttl == 0 {
		out.TTL = "never"
	}
	if err := json.NewEncoder(cmd.OutOrStdout()).Encode(out); err != nil {
		ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("metadata server listening", zap.String("address", addr), zap.String("path", path), zap.String("ttl", out.TTL))
	select {
	case err := <-served:
		return fmt.Errorf("metadata-server: serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(shutdown)
	<-served
	st := srv.Stats()
	log.Info("metadata server stopped", zap.Int("entries", st.Entries), zap.Uint64("gets", st.Gets), zap.Uint64("puts", st.Puts))
	if err != nil {
		return fmt.Errorf("metadata-server: shutting down: %w", err)
	}
	return nil
}

// reachable replaces an unspecified listen address by this host's name,
// for the url a node would use.
func reachable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}
