package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/metadata"
)

// DoctorMetadata is what doctor learned about the metadata service.
type DoctorMetadata struct {
	URL string `json:"url"` // password hidden
	// Steps are what was tried, in order, each with its round-trip time.
	Steps []DoctorStep `json:"steps"`
	OK    bool         `json:"ok"`
	Error string       `json:"error,omitempty"`
}

// DoctorStep is one request to the metadata service.
type DoctorStep struct {
	What string        `json:"what"`
	Took time.Duration `json:"took_ns"`
	Err  string        `json:"error,omitempty"`
}

// probeMetadata connects to the configured service, writes a probe key
// (a segment under this node's lease), reads it back and deletes it, and
// says what failed. nil in P2P mode.
func probeMetadata(ctx context.Context, cfg connector.Config) *DoctorMetadata {
	o, ok := cfg.MetadataOptions(nil)
	if !ok {
		return nil
	}
	d := &DoctorMetadata{URL: metadata.Redact(cfg.Metadata)}
	step := func(what string, f func() error) bool {
		start := time.Now()
		err := f()
		s := DoctorStep{What: what, Took: time.Since(start)}
		if err != nil {
			s.Err = err.Error()
			d.Error = fmt.Sprintf("metadata service %s: %s failed: %v", d.URL, what, err)
		}
		d.Steps = append(d.Steps, s)
		return err == nil
	}
	var svc metadata.Service
	if !step("connect", func() (err error) { svc, err = metadata.Open(ctx, o); return err }) {
		return d
	}
	host, _ := os.Hostname()
	seg := fmt.Sprintf("kvconnect-doctor-%s-%d", host, os.Getpid())
	desc := []byte(fmt.Sprintf(`{"name":%q,"protocol":"tcp","buffers":[]}`, seg))
	wrote := step("write a probe key ("+metadata.NewKeys(cfg.MetadataClusterID).Segment(seg)+")", func() error {
		return svc.Publish(ctx, seg, desc, metadata.RPCLocation{Host: "127.0.0.1", Port: 1})
	})
	if wrote {
		step("read it back", func() error { _, err := svc.Resolve(ctx, seg); return err })
	}
	ok = step("delete it", func() error { return svc.Close(ctx) })
	d.OK = d.Error == "" && ok
	return d
}

func printMetadata(w io.Writer, d *DoctorMetadata) {
	if d == nil {
		fmt.Fprintf(w, "  metadata: P2PHANDSHAKE (no service)\n")
		return
	}
	fmt.Fprintf(w, "  metadata: %s\n", d.URL)
	for _, s := range d.Steps {
		if s.Err != "" {
			fmt.Fprintf(w, "    %s: FAILED after %v: %s\n", s.What, s.Took.Round(time.Microsecond), s.Err)
		} else {
			fmt.Fprintf(w, "    %s: ok, %v\n", s.What, s.Took.Round(time.Microsecond))
		}
	}
}
