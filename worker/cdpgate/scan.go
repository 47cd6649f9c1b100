package cdpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// The light path of every frame (docs/automation.md, "Figures"): a scan of
// the top-level members only, instead of decoding the whole message.
// Client commands that the rules plainly allow (no check reads their
// params) are forwarded with their params' bytes as sent; anything else
// takes parseCommand's full decode and the gate's own encoding, as before.

var errNotSimple = errors.New("cdpgate: not a simple frame")

// eachMember calls fn with the raw key (between its quotes) and raw value
// of each member of the JSON object data, in order. data must be valid
// JSON (json.Valid for a client's frame; Chromium's are trusted, and a
// malformed one ends in an error, never a panic).
func eachMember(data []byte, fn func(key, val []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errNotSimple
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	for i < len(data) {
		if data[i] != '"' {
			return errNotSimple
		}
		end := skipString(data, i)
		if end < 0 {
			return errNotSimple
		}
		key := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return errNotSimple
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if vend < 0 {
			return errNotSimple
		}
		if err := fn(key, data[i:vend]); err != nil {
			return err
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return errNotSimple
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return nil
		default:
			return errNotSimple
		}
	}
	return errNotSimple
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at data[i] (a
// quote), or -1. A quote ends it unless an odd run of backslashes
// precedes it.
func skipString(data []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for b := q - 1; b > i && data[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// skipValue returns the index after the value starting at data[i], or -1.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end := skipString(data, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}

// plainString is the content of the JSON string val if it needs no
// unescaping and is printable ASCII (method names, session ids).
func plainString(val []byte) (string, bool) {
	if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
		return "", false
	}
	s := val[1 : len(val)-1]
	for _, b := range s {
		if b < 0x20 || b > 0x7e || b == '\\' || b == '"' {
			return "", false
		}
	}
	return string(s), true
}

// scanCommand is the light path of parseCommand: a frame whose members
// are exactly id (an integer), method, and optionally sessionId and
// params (an object), each once, with unescaped names and plain strings.
// The envelope Chromium gets is then rebuilt from what was checked, as
// parseCommand's; params stay as sent (c.raw) until a check needs them
// (c.decodeParams). errNotSimple: take parseCommand.
func scanCommand(data []byte) (*command, error) {
	if !json.Valid(data) {
		return nil, errNotSimple
	}
	c := &command{}
	var seen [4]bool
	err := eachMember(data, func(key, val []byte) error {
		k := -1
		switch string(key) {
		case "id":
			k = 0
			if len(val) == 0 || bytes.ContainsAny(val, ".eE") {
				return errNotSimple
			}
			id, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return errNotSimple
			}
			c.id = strconv.FormatInt(id, 10)
		case "method":
			k = 1
			s, ok := plainString(val)
			if !ok || s == "" {
				return errNotSimple
			}
			c.method = s
		case "sessionId":
			k = 2
			if string(val) != "null" {
				s, ok := plainString(val)
				if !ok {
					return errNotSimple
				}
				c.session = s
			}
		case "params":
			k = 3
			if string(val) != "null" {
				if val[0] != '{' {
					return errNotSimple
				}
				c.raw = val
			}
		}
		if k < 0 || seen[k] {
			return errNotSimple // another member, or one twice
		}
		seen[k] = true
		return nil
	})
	if err != nil || !seen[0] || !seen[1] {
		return nil, errNotSimple
	}
	return c, nil
}

// readCommand parses a client frame, on the light path if it can.
func readCommand(data []byte) (*command, error) {
	if c, err := scanCommand(data); err == nil {
		return c, nil
	}
	return parseCommand(data)
}

// decodeParams makes c.params from the params as sent, for a check.
func (c *command) decodeParams() error {
	if c.params != nil {
		return nil
	}
	c.params = map[string]any{}
	if c.raw == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.raw))
	dec.UseNumber()
	if err := dec.Decode(&c.params); err != nil || c.params == nil {
		return errors.New("params is not an object")
	}
	c.raw = nil
	return nil
}

// appendCommand appends the upstream frame of a command under the gate's
// id whose params are still as sent (or none): the envelope is the gate's.
func appendCommand(b []byte, id int64, c *command) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"`...)
	b = append(b, c.method...)
	b = append(b, `","params":`...)
	if c.raw == nil {
		b = append(b, "{}"...)
	} else {
		b = append(b, c.raw...)
	}
	if c.session != "" {
		b = append(b, `,"sessionId":"`...)
		b = append(b, c.session...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// scanUp reads a frame from Chromium into m: its id, method and sessionId,
// and its params, result and error as raw slices of data. Frames with
// escaped strings in those members (never seen) take json.Unmarshal.
func scanUp(data []byte, m *upMessage) error {
	err := eachMember(data, func(key, val []byte) error {
		switch string(key) {
		case "id":
			id, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return errNotSimple
			}
			m.ID = &id
		case "method":
			s, ok := plainString(val)
			if !ok {
				return errNotSimple
			}
			m.Method = s
		case "sessionId":
			s, ok := plainString(val)
			if !ok {
				return errNotSimple
			}
			m.SessionID = s
		case "params":
			m.Params = val
		case "result":
			m.Result = val
		case "error":
			m.Error = val
		}
		return nil
	})
	if err == nil {
		return nil
	}
	*m = upMessage{}
	return json.Unmarshal(data, m)
}
