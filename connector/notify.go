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
	if err := c.validSession(session); err != nil { // host:port, or a name the metadata service knows
		return err
	}
	ctx, cancel := c.withTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	body := marshal(requestBody{KVConnect: c.mark(), Name: name, NotifyMsg: msg})
	f, err := c.request(ctx, session, frameNotify, body)
	if err != nil {
		return err
	}
	defer f.release()
	var reply notifyReply
	if err := json.Unmarshal(f.body, &reply); err != nil || reply.NotifyMsg == "" {
		return fmt.Errorf("connector: notify %s: the peer did not accept it (reply %q): %w", session, f.body, ErrPeerUnreachable)
	}
	return nil
}

// Notification is a message a peer sent with Notify, or a Mooncake node
// with its notify (submitTransferWithNotify).
type Notification struct {
	From string `json:"from"` // the sender's session id ("" from a Mooncake node)
	Name string `json:"name"`
	Msg  string `json:"msg"` // Mooncake's notify_msg
}
