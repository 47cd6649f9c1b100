// Package cdpraw sends Chrome DevTools Protocol commands over a plain
// WebSocket, one at a time, and waits for each answer, skipping events:
// how benchmarks and tests drive a CDP endpoint (Chromium's, or the
// worker's gate) without a client library opening targets of its own.
package cdpraw

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// Conn is a CDP connection. Next is the last command id used: callers
// that pipeline commands themselves take ids after it and move it on.
type Conn struct {
	WS   *websocket.Conn
	Next int
	// Timeout bounds each write and each wait for an answer (0: none).
	Timeout time.Duration
}

// Call sends method with params (nil: none) to session ("": the browser)
// and decodes its result into result (nil: dropped).
func (c *Conn) Call(session, method string, params, result any) error {
	c.Next++
	m := map[string]any{"id": c.Next, "method": method}
	if params != nil {
		m["params"] = params
	}
	if session != "" {
		m["sessionId"] = session
	}
	if c.Timeout > 0 {
		c.WS.SetWriteDeadline(time.Now().Add(c.Timeout))
		c.WS.SetReadDeadline(time.Now().Add(c.Timeout))
		defer c.WS.SetReadDeadline(time.Time{})
	}
	if err := c.WS.WriteJSON(m); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	for {
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_, raw, err := c.WS.ReadMessage()
		if err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if json.Unmarshal(raw, &r) != nil || r.ID != c.Next {
			continue // an event, or an answer to a pipelined command
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(r.Result, result)
	}
}
