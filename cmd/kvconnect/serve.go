package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/units"
)

func init() { subcommands = append(subcommands, newServeCommand) }

func newServeCommand() *cobra.Command {
	var alloc string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a node: register memory and serve handshakes until interrupted",
		Long: `serve starts a kvconnect node with the configured transport, allocates
--alloc bytes of shared memory, registers it, prints the node's session id
and status as JSON on stdout, and serves peers until SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := units.ParseSize(alloc)
			switch {
			case err != nil:
				return fmt.Errorf("--alloc %q: %v: want a size like 64MiB, at most %s", alloc, err, units.FormatSize(connector.MaxRegionSize))
			case size == 0 || size > connector.MaxRegionSize:
				return fmt.Errorf("--alloc %q: want a size between 1 byte and %s, like 64MiB", alloc, units.FormatSize(connector.MaxRegionSize))
			}
			loaded, log, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			defer log.Sync()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := connector.New(ctx, loaded.Config, connector.WithLogger(log))
			if err != nil {
				return err
			}
			defer c.Close()
			region, err := c.Alloc(ctx, int(size))
			if err != nil {
				return err
			}
			out := struct {
				connector.Status
				Region struct {
					ID   uint64 `json:"id"`
					Addr uint64 `json:"addr"`
					Len  int    `json:"length"`
				} `json:"region"`
			}{Status: c.Status()}
			out.Region.ID, out.Region.Addr, out.Region.Len = uint64(region.ID()), region.Addr(), region.Len()
			enc := json.NewEncoder(cmd.OutOrStdout())
			if err := enc.Encode(out); err != nil {
				return err
			}
			log.Info("serving; press Ctrl-C to stop", zap.String("session", c.SessionID()))
			for {
				select {
				case <-ctx.Done():
					// From here a second SIGINT or SIGTERM ends the process at
					// once (the plugins die with it), for a shutdown that hangs
					// on a peer or a metadata service.
					stop()
					log.Info("shutting down; a second Ctrl-C forces exit")
					if err := c.Close(); err != nil {
						return fmt.Errorf("shutting down: %w", err)
					}
					return nil
				case n, ok := <-c.Notifications():
					if !ok {
						return nil
					}
					log.Info("notification", zap.String("from", n.From), zap.String("name", n.Name), zap.String("msg", n.Msg))
				}
			}
		},
	}
	cmd.Flags().StringVar(&alloc, "alloc", "64MiB", "shared memory to allocate and register")
	return cmd
}
