package connector

import (
	"context"
	"encoding/json"
	"fmt"
)

// deliver queues a notification from a peer.
func (c *Connector) deliver(n Notification) error {
	select {
	case c.notify <- n:
		return nil
	default:
		return fmt.Errorf("connector: %s: notification queue full (%d waiting); the receiver is not reading Notifications: %w", c.session, cap(c.notify), ErrUnavailable)
	}
}

// Notifications delivers messages peers sent with Notify. It is closed by
// Close.
func (c *Connector) Notifications() <-chan Notification { return c.notify }

// Notify sends a small message to a peer's node (Mooncake's notify), e.g.
// "these blocks are written".
func (c *Connector) Notify(ctx context.Context, session, name, msg string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if _, _, err := splitSession(session); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	body, err := json.Marshal(Notification{From: c.session, Name: name, Msg: msg})
	if err != nil {
		return err
	}
	_, err = request(ctx, session, frameNotify, body, c.cfg.MaxHandshakeFrame)
	return err
}

// Notification is a message a peer sent with Notify (Mooncake's notifies).
type Notification struct {
	From string `json:"from"` // the sender's session id
	Name string `json:"name"`
	Msg  string `json:"msg"`
}
