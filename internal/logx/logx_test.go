package logx

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestStdLoggerKeepsLevel(t *testing.T) {
	for _, tc := range []struct{ line, level, msg string }{
		{"[WARN] memberlist: suspect node", "warn", "memberlist: suspect node"},
		{"[ERR] memberlist: failed", "error", "memberlist: failed"},
		{"[DEBUG] memberlist: probe", "debug", "memberlist: probe"},
		{"plain line", "info", "plain line"},
	} {
		var buf bytes.Buffer
		l, err := New(&buf, "json", "debug")
		if err != nil {
			t.Fatal(err)
		}
		StdLogger(l).Print(tc.line)
		var got map[string]any
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%q: not JSON: %v", buf.String(), err)
		}
		if got["level"] != tc.level || got["message"] != tc.msg {
			t.Errorf("%q logged as %v", tc.line, got)
		}
	}
}

func TestNewRejectsBadFlags(t *testing.T) {
	if _, err := New(nil, "xml", ""); err == nil {
		t.Error("format xml accepted")
	}
	if _, err := New(nil, "json", "loud"); err == nil {
		t.Error("level loud accepted")
	}
}
