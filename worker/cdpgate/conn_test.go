package cdpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// cdpConn is a raw CDP client for the tests: it talks to Chromium (the
// test's own view) or to the gate (the automation client's view), records
// every event and tells how the server closed the connection.
type cdpConn struct {
	t    testing.TB
	ws   *websocket.Conn
	done chan struct{} // the reader ended

	mu       sync.Mutex
	nextID   int64
	waiting  map[int64]chan reply
	events   []event
	closeErr error // what ended the reader
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	SessionID string `json:"sessionId"`
}

type event struct {
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
}

func dialCDP(t testing.TB, url string) *cdpConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c := &cdpConn{t: t, ws: ws, done: make(chan struct{}), waiting: map[int64]chan reply{}}
	go c.read()
	t.Cleanup(c.Close)
	return c
}

func (c *cdpConn) read() {
	defer close(c.done)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.mu.Lock()
			c.closeErr = err
			for id, ch := range c.waiting {
				close(ch)
				delete(c.waiting, id)
			}
			c.mu.Unlock()
			return
		}
		var id struct {
			ID *int64 `json:"id"`
		}
		var r reply
		var e event
		err = json.Unmarshal(data, &id)
		if err == nil && id.ID != nil {
			err = json.Unmarshal(data, &r)
		} else if err == nil {
			err = json.Unmarshal(data, &e)
		}
		if err != nil {
			c.t.Errorf("bad frame %s: %v", data, err)
			continue
		}
		c.mu.Lock()
		if id.ID != nil {
			if ch, ok := c.waiting[*id.ID]; ok {
				ch <- r
				delete(c.waiting, *id.ID)
			} else {
				c.t.Errorf("reply to an unknown id: %s", data)
			}
		} else {
			c.events = append(c.events, e)
		}
		c.mu.Unlock()
	}
}

// Close closes the connection and waits for the reader.
func (c *cdpConn) Close() {
	c.ws.Close()
	<-c.done
}

// send sends a raw frame.
func (c *cdpConn) send(frame string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// Do sends a command and returns its reply; a CDP error is an error.
func (c *cdpConn) Do(session, method string, params any) (json.RawMessage, error) {
	c.t.Helper()
	r := c.raw(session, method, params)
	if r.Error != nil {
		return nil, fmt.Errorf("%s: %d %s", method, r.Error.Code, r.Error.Message)
	}
	return r.Result, nil
}

// raw sends a command and returns the whole reply.
func (c *cdpConn) raw(session, method string, params any) reply {
	c.t.Helper()
	if params == nil {
		params = struct{}{}
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.waiting[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	if err := c.ws.WriteJSON(msg); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			c.t.Fatalf("%s: connection closed: %v", method, c.err())
		}
		if r.SessionID != session {
			c.t.Errorf("%s: reply has sessionId %q, want %q", method, r.SessionID, session)
		}
		return r
	case <-time.After(testutil.Scale(30 * time.Second)):
		c.t.Fatalf("%s: no reply", method)
		return reply{}
	}
}

// must is Do that fails the test on an error, decoding the result into T.
func must[T any](c *cdpConn, session, method string, params any) T {
	c.t.Helper()
	res, err := c.Do(session, method, params)
	if err != nil {
		c.t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(res, &v); err != nil {
		c.t.Fatalf("%s: %v in %s", method, err, res)
	}
	return v
}

// Events returns the events seen so far.
func (c *cdpConn) Events() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event(nil), c.events...)
}

// waitEvent waits for an event that match accepts.
func (c *cdpConn) waitEvent(method string, match func(event) bool) event {
	c.t.Helper()
	var got event
	testutil.Eventually(c.t, 30*time.Second, func() error {
		for _, e := range c.Events() {
			if e.Method == method && (match == nil || match(e)) {
				got = e
				return nil
			}
		}
		return errors.New("no " + method + " event yet")
	})
	return got
}

func (c *cdpConn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// closed waits for the server to close the connection and returns its
// close error.
func (c *cdpConn) closed() *websocket.CloseError {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(testutil.Scale(30 * time.Second)):
		c.t.Fatal("the connection was not closed")
	}
	var ce *websocket.CloseError
	if !errors.As(c.err(), &ce) {
		c.t.Fatalf("connection ended without a close frame: %v", c.err())
	}
	return ce
}

// mentions reports whether any event seen so far contains s.
func (c *cdpConn) mentions(s string) []event {
	var hits []event
	for _, e := range c.Events() {
		if strings.Contains(string(e.Params), s) {
			hits = append(hits, e)
		}
	}
	return hits
}

// evaluate runs expr in a session and returns its value.
func (c *cdpConn) evaluate(session, expr string) any {
	c.t.Helper()
	r := must[struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}](c, session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if r.ExceptionDetails != nil {
		c.t.Fatalf("evaluate %s: %v", expr, r.ExceptionDetails)
	}
	return r.Result.Value
}
