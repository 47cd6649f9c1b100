package cdpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gorilla/websocket"
)

// command is a client's command after validation. The gate forwards its
// own encoding of the envelope (id, method, sessionId), never the
// client's, so Chromium sees exactly what the rules checked (no duplicate,
// escaped or unknown keys); params go as sent only when no check reads
// them (scan.go), else re-encoded from what the check saw.
type command struct {
	id      string // the client's id, canonical decimal, echoed in the reply
	method  string
	session string         // "" at browser level
	reply   string         // the sessionId of the reply: session, or the gate's browser session it came in
	params  map[string]any // numbers are json.Number; nil: not decoded (raw), see decodeParams
	raw     []byte         // the params as sent (an object; nil: none), while params is nil

	// Set by a rule's check:
	after func(result []byte) ([]byte, error) // rewrites or records the result (upstream reader)
	local []byte                              // a reply the gate gives itself; not forwarded
}

// level is where a command is sent: to the browser target (no sessionId)
// or into an attached session.
type level uint8

const (
	browserLevel level = 1 << iota
	sessionLevel
	bothLevels = browserLevel | sessionLevel
)

func (c *command) level() level {
	if c.session == "" {
		return browserLevel
	}
	return sessionLevel
}

// parseCommand validates a client frame: a JSON object with an integer id,
// a non-empty string method, an optional string sessionId and an optional
// object params. Anything else is a protocol violation (close 1007).
func parseCommand(data []byte) (*command, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if env == nil {
		return nil, errors.New("not a JSON object")
	}
	c := &command{}
	n, ok := env["id"].(json.Number)
	if !ok {
		return nil, errors.New("id is not an integer")
	}
	id, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return nil, errors.New("id is not an integer")
	}
	c.id = strconv.FormatInt(id, 10)
	if c.method, ok = env["method"].(string); !ok || c.method == "" {
		return nil, errors.New("method is not a string")
	}
	switch s := env["sessionId"].(type) {
	case nil:
	case string:
		c.session = s
	default:
		return nil, errors.New("sessionId is not a string")
	}
	switch p := env["params"].(type) {
	case nil:
		c.params = map[string]any{}
	case map[string]any:
		c.params = p
	default:
		return nil, errors.New("params is not an object")
	}
	return c, nil
}

// encodeCommand is the upstream frame of a command under the gate's id.
func encodeCommand(id int64, method, session string, params any) ([]byte, error) {
	if params == nil {
		params = struct{}{}
	}
	return json.Marshal(struct {
		ID        int64  `json:"id"`
		Method    string `json:"method"`
		Params    any    `json:"params"`
		SessionID string `json:"sessionId,omitempty"`
	}{id, method, params, session})
}

// upMessage is a frame from Chromium: a response (ID set) or an event.
// Chromium is trusted, so its raw result and params pass without a
// re-encoding unless a rule rewrites them.
type upMessage struct {
	ID        *int64          `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
}

// detach copies what m holds of the frame it was read from.
func (m *upMessage) detach() *upMessage {
	d := *m
	d.Params = bytes.Clone(m.Params)
	d.Result = bytes.Clone(m.Result)
	d.Error = bytes.Clone(m.Error)
	return &d
}

// readFrame reads the next message of c into *buf, reused from one message
// to the next (the result is valid until the next call).
func readFrame(c *websocket.Conn, buf *[]byte) ([]byte, error) {
	_, r, err := c.NextReader()
	if err != nil {
		return nil, err
	}
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if cap(b) <= 1<<20 { // a big message's buffer is not kept
		*buf = b
	}
	return b, nil
}

// cdpError is a protocol error as the client sees it.
type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	raw     []byte // Chromium's own error object, passed on as is
}

func (e *cdpError) Error() string { return e.Message }

func (e *cdpError) object() []byte {
	if e.raw != nil {
		return e.raw
	}
	b, _ := json.Marshal(e)
	return b
}

// JSON-RPC codes Chromium uses.
const (
	codeServerError   = -32000
	codeNotFound      = -32601 // method not found: what a denied method looks like
	codeInvalidParams = -32602
)

func notAllowed(method string) *cdpError {
	return &cdpError{Code: codeNotFound, Message: method + " is not allowed by the automation gate"}
}

func paramNotAllowed(method, param string) *cdpError {
	return &cdpError{Code: codeInvalidParams, Message: method + ": " + param + " is not allowed by the automation gate"}
}

// Errors worded as Chromium's own, so a refused id of another user and an
// id that does not exist cannot be told apart.
var (
	errNoTarget  = &cdpError{Code: codeInvalidParams, Message: "No target with given id found"}
	errNoSession = &cdpError{Code: codeServerError, Message: "Session with given id not found."}
	errNoContext = &cdpError{Code: codeInvalidParams, Message: "Failed to find browser context for id"}
)

// response is a reply frame for the client.
func response(id, session string, result []byte, e *cdpError) []byte {
	return appendResponse(nil, id, session, result, e)
}

// appendResponse appends a reply frame for the client to b.
func appendResponse(b []byte, id, session string, result []byte, e *cdpError) []byte {
	b = append(b, `{"id":`...)
	b = append(b, id...)
	if e != nil {
		b = append(b, `,"error":`...)
		b = append(b, e.object()...)
	} else {
		b = append(b, `,"result":`...)
		if len(result) == 0 {
			result = []byte("{}")
		}
		b = append(b, result...)
	}
	if session != "" {
		s, _ := json.Marshal(session)
		b = append(b, `,"sessionId":`...)
		b = append(b, s...)
	}
	return append(b, '}')
}

// withSession is an event frame of Chromium's (a JSON object without a
// sessionId) as sent in session s.
func withSession(event []byte, s string) []byte {
	e := bytes.TrimRight(event, " \t\r\n")
	if len(e) < 2 || e[len(e)-1] != '}' {
		return event
	}
	id, _ := json.Marshal(s)
	out := make([]byte, 0, len(e)+len(id)+14)
	out = append(out, e[:len(e)-1]...)
	out = append(out, `,"sessionId":`...)
	out = append(out, id...)
	return append(out, '}')
}

// str is the string param name ("" when absent or not a string).
func str(p map[string]any, name string) string {
	s, _ := p[name].(string)
	return s
}

// domain is the part of a method name before the dot.
func domain(method string) string {
	d, _, _ := strings.Cut(method, ".")
	return d
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence
// (a close frame's reason is at most 123 bytes).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
