package engine

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/web"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// serverMsgs and clientMsgs are every control message type, one value
// each; TestProtocolListsComplete keeps them complete.
var (
	serverMsgs = []serverMsg{helloMsg{}, pageMsg{}, pongMsg{}, roleMsg{}, closedMsg{}, movedMsg{},
		errorMsg{}, holdMsg{}, heldMsg{}, resumeMsg{}, dialogMsg{}, dialogClosedMsg{}, clipboardMsg{},
		fileChooserMsg{}, downloadMsg{}, editableMsg{}, takeoverMsg{}}
	clientMsgs = []clientMsg{pingMsg{}, ackMsg{}, inputMsg{}, refreshMsg{}, answerMsg{}, handBackMsg{}, capsMsg{}}
)

// The messages' bytes are those engines have always been sent: "t" first,
// the fields in their order, empty ones left out, HTML characters escaped
// (but a held input's own bytes kept).
func TestEncodeWire(t *testing.T) {
	tests := []struct {
		msg  serverMsg
		want string
	}{
		{helloMsg{Browser: "b1", Instance: "w-1.i", App: "/chat", Worker: "w-1", Page: &browser.Page{URL: "https://x/", Title: "X"}, ReadOnly: true},
			`{"t":"hello","browser":"b1","instance":"w-1.i","app":"/chat","worker":"w-1","page":{"url":"https://x/","title":"X"},"readOnly":true}`},
		{helloMsg{Browser: "b1", Page: &browser.Page{}}, `{"t":"hello","browser":"b1","page":{"url":"","title":""}}`},
		{helloMsg{Browser: "b1", NoFrames: true}, `{"t":"hello","browser":"b1","noFrames":true}`},
		{dialogMsg{ID: 3, Kind: "prompt", Message: "Name?", Default: "bob", URL: "https://x/"},
			`{"t":"dialog","id":3,"kind":"prompt","message":"Name?","default":"bob","url":"https://x/"}`},
		{dialogClosedMsg{ID: 3, Accepted: true}, `{"t":"dialogClosed","id":3,"accepted":true}`},
		{clipboardMsg{Text: "copied <text>"}, `{"t":"clipboard","text":"copied \u003ctext\u003e"}`},
		{fileChooserMsg{ID: 2, Multiple: true, Accept: "image/*"}, `{"t":"fileChooser","id":2,"multiple":true,"accept":"image/*"}`},
		{downloadMsg{ID: "g", Name: "a.csv", Total: 9, Received: 4, State: "inProgress"}, `{"t":"download","id":"g","name":"a.csv","total":9,"received":4,"state":"inProgress"}`},
		{editableMsg{On: true}, `{"t":"editable","on":true}`},
		{takeoverMsg{User: "ann"}, `{"t":"takeover","user":"ann"}`},
		{takeoverMsg{}, `{"t":"takeover","user":""}`},
		{pageMsg{URL: "about:blank", Title: "<b>"}, `{"t":"page","url":"about:blank","title":"\u003cb\u003e"}`},
		{pageMsg{}, `{"t":"page"}`},
		{pongMsg{Seq: 7, Data: "abc"}, `{"t":"pong","seq":7,"data":"abc"}`},
		{pongMsg{}, `{"t":"pong"}`},
		{roleMsg{ReadOnly: true}, `{"t":"role","readOnly":true}`},
		{roleMsg{}, `{"t":"role"}`},
		{closedMsg{Reason: "gone", Reload: "/chat"}, `{"t":"closed","reason":"gone","reload":"/chat"}`},
		{closedMsg{Reason: "gone"}, `{"t":"closed","reason":"gone"}`},
		{movedMsg{Reason: "drained"}, `{"t":"moved","reason":"drained"}`},
		{errorMsg{Message: "bad & worse"}, `{"t":"error","message":"bad \u0026 worse"}`},
		{holdMsg{}, `{"t":"hold"}`},
		{heldMsg{Input: json.RawMessage(`{"type":"keydown","key":"<", "t":"input"}`)}, `{"t":"held","input":{"type":"keydown","key":"<", "t":"input"}}`},
		{resumeMsg{}, `{"t":"resume"}`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%T", tc.msg), func(t *testing.T) {
			got := string(encode(tc.msg))
			if got != tc.want {
				t.Errorf("encode(%#v)\n got %s\nwant %s", tc.msg, got, tc.want)
			}
			var back map[string]any
			if err := json.Unmarshal([]byte(got), &back); err != nil || back["t"] != string(tc.msg.serverKind()) {
				t.Errorf("%s: not an object of kind %q: %v", got, tc.msg.serverKind(), err)
			}
		})
	}
	if string(holdJSON) != `{"t":"hold"}` || string(resumeJSON) != `{"t":"resume"}` {
		t.Errorf("hold %s, resume %s", holdJSON, resumeJSON)
	}
}

// Each client message, as engine.js writes it, decodes to its kind, a
// handler and the message's own fields.
func TestDecodeClientMessages(t *testing.T) {
	tests := []struct {
		raw  string
		want clientMsg
		get  func(*clientEnvelope) clientMsg
	}{
		{`{"t":"ping","seq":3,"data":"x"}`, pingMsg{Seq: 3, Data: "x"}, func(e *clientEnvelope) clientMsg { return e.ping() }},
		{`{"t":"ping","seq":0}`, pingMsg{}, func(e *clientEnvelope) clientMsg { return e.ping() }},
		{`{"t":"ack","seq":1234567}`, ackMsg{Seq: 1234567}, func(e *clientEnvelope) clientMsg { return e.ack() }},
		{`{"type":"keydown","key":"a","code":"KeyA","keyCode":65,"modifiers":0,"text":"a","t":"input"}`,
			inputMsg{browser.InputEvent{Type: browser.InputKeyDown, Key: "a", Code: "KeyA", KeyCode: 65, Text: "a"}},
			func(e *clientEnvelope) clientMsg { return e.input() }},
		{`{"type":"resize","width":800,"height":600,"t":"input"}`,
			inputMsg{browser.InputEvent{Type: browser.InputResize, Width: 800, Height: 600}},
			func(e *clientEnvelope) clientMsg { return e.input() }},
		{`{"t":"refresh"}`, refreshMsg{}, func(*clientEnvelope) clientMsg { return refreshMsg{} }},
		{`{"t":"answer","dialog":7,"accept":true,"value":"日本語"}`, answerMsg{Dialog: 7, Accept: true, Value: "日本語"},
			func(e *clientEnvelope) clientMsg { return e.answer() }},
		{`{"t":"answer","dialog":8,"accept":true,"value":"ann","password":"s3cret"}`, answerMsg{Dialog: 8, Accept: true, Value: "ann", Password: "s3cret"},
			func(e *clientEnvelope) clientMsg { return e.answer() }},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			var e clientEnvelope
			if err := json.Unmarshal([]byte(tc.raw), &e); err != nil {
				t.Fatal(err)
			}
			if e.T != tc.want.clientKind() {
				t.Errorf("kind %q, want %q", e.T, tc.want.clientKind())
			}
			if clientHandlers[e.T] == nil {
				t.Errorf("no handler for %q", e.T)
			}
			if got := tc.get(&e); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
	if clientHandlers["resize"] != nil || clientHandlers[""] != nil {
		t.Error("a handler for a kind engines do not send")
	}
}

// TestProtocolListsComplete: serverMsgs and clientMsgs hold every type with
// a serverKind or clientKind method, each kind once, and the worker has a
// handler for exactly the client kinds: a message added without its
// place in the lists fails here, not in a user's browser.
func TestProtocolListsComplete(t *testing.T) {
	declared := map[string][]string{} // method -> receiver type names
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || (fd.Name.Name != "serverKind" && fd.Name.Name != "clientKind") {
				continue
			}
			if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
				declared[fd.Name.Name] = append(declared[fd.Name.Name], id.Name)
			}
		}
	}
	listed := map[string][]string{}
	kinds := map[msgKind]string{}
	note := func(method string, m any, k msgKind) {
		name := reflect.TypeOf(m).Name()
		listed[method] = append(listed[method], name)
		if other, dup := kinds[k]; dup {
			t.Errorf("%s and %s are both of kind %q", other, name, k)
		}
		kinds[k] = name
	}
	for _, m := range serverMsgs {
		note("serverKind", m, m.serverKind())
	}
	for _, m := range clientMsgs {
		note("clientKind", m, m.clientKind())
		if clientHandlers[m.clientKind()] == nil {
			t.Errorf("no clientHandlers entry for %q (%T)", m.clientKind(), m)
		}
	}
	for k := range clientHandlers {
		if !slices.ContainsFunc(clientMsgs, func(m clientMsg) bool { return m.clientKind() == k }) {
			t.Errorf("clientHandlers takes %q, which no client message type has", k)
		}
	}
	for _, method := range []string{"serverKind", "clientKind"} {
		slices.Sort(declared[method])
		slices.Sort(listed[method])
		if !slices.Equal(declared[method], listed[method]) {
			t.Errorf("types with a %s method: %v; listed in enginemsg_test.go: %v", method, declared[method], listed[method])
		}
	}
}

// TestEngineSpeaksTheProtocol holds engine.js to the worker's messages,
// both ways, as TestClientsMatchContracts (internal/contract) does the
// RMI clients: a kind the worker sends that engine.js ignores, or one
// engine.js sends that the worker answers with an error, fails here. The
// altered copies show each mismatch is named.
func TestEngineSpeaksTheProtocol(t *testing.T) {
	b, err := fs.ReadFile(web.Static, "engine.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	tests := []struct {
		name string
		from string // replaced by to in engine.js ("" = as served)
		to   string
		want []string
	}{
		{name: "engine.js as served"},
		{name: "a case removed", from: `case "resume":`, to: ``,
			want: []string{`the worker sends "resume" (engine.resumeMsg), but engine.js's onMessage has no case for it`}},
		{name: "a case the worker never sends", from: `case "pong":`, to: `case "pong": case "bogus":`,
			want: []string{`engine.js's onMessage has a case for "bogus", which the worker never sends`}},
		{name: "a kind misspelt", from: `ev.t = "input";`, to: `ev.t = "inptu";`,
			want: []string{
				`engine.js sends "inptu", which the worker does not take (no clientHandlers entry)`,
				`the worker takes "input" (engine.inputMsg), but engine.js never sends it`,
			}},
		{name: "a send removed", from: `send({t: "ack", seq: n})`, to: `n`,
			want: []string{`the worker takes "ack" (engine.ackMsg), but engine.js never sends it`}},
		{name: "a kind in a comment only", from: `function ack(n) { send({t: "ack", seq: n}); }`, to: `function ack(n) { /* send({t: "ack", seq: n}) */ }`,
			want: []string{`the worker takes "ack" (engine.ackMsg), but engine.js never sends it`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := src
			if tc.from != "" {
				if !strings.Contains(js, tc.from) {
					t.Fatalf("engine.js has no %q to alter", tc.from)
				}
				js = strings.ReplaceAll(js, tc.from, tc.to)
			}
			got, err := protocolMismatches(js)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("mismatches:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// protocolMismatches compares the kinds engine.js handles (the cases of
// onMessage's switch) and sends ({t: "x"} and x.t = "x") with those the
// worker sends (serverMsgs) and takes (clientHandlers).
func protocolMismatches(js string) ([]string, error) {
	js = jsWithoutComments(js)
	i := strings.Index(js, "function onMessage(")
	if i < 0 {
		return nil, fmt.Errorf("engine.js has no function onMessage")
	}
	j := strings.Index(js[i:], "switch (m.t) {")
	if j < 0 {
		return nil, fmt.Errorf("engine.js's onMessage has no switch (m.t)")
	}
	sw, err := jsBlock(js[i+j:])
	if err != nil {
		return nil, err
	}
	handled := map[msgKind]bool{}
	for _, m := range regexp.MustCompile(`\bcase\s+"(\w+)"\s*:`).FindAllStringSubmatch(sw, -1) {
		handled[msgKind(m[1])] = true
	}
	sent := map[msgKind]bool{}
	for _, m := range regexp.MustCompile(`(?:[{,]\s*t\s*:|\.t\s*=)\s*"(\w+)"`).FindAllStringSubmatch(js, -1) {
		sent[msgKind(m[1])] = true
	}
	var out []string
	sends := map[msgKind]bool{}
	for _, m := range serverMsgs {
		k := m.serverKind()
		sends[k] = true
		if !handled[k] {
			out = append(out, fmt.Sprintf("the worker sends %q (%T), but engine.js's onMessage has no case for it", k, m))
		}
	}
	for _, k := range sortedKinds(handled) {
		if !sends[k] {
			out = append(out, fmt.Sprintf("engine.js's onMessage has a case for %q, which the worker never sends", k))
		}
	}
	for _, k := range sortedKinds(sent) {
		if clientHandlers[k] == nil {
			out = append(out, fmt.Sprintf("engine.js sends %q, which the worker does not take (no clientHandlers entry)", k))
		}
	}
	for _, m := range clientMsgs {
		if k := m.clientKind(); clientHandlers[k] != nil && !sent[k] {
			out = append(out, fmt.Sprintf("the worker takes %q (%T), but engine.js never sends it", k, m))
		}
	}
	return out, nil
}

func sortedKinds(set map[msgKind]bool) []msgKind {
	var ks []msgKind
	for k := range set {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// jsWithoutComments blanks JavaScript comments, so a kind named in one
// counts for nothing. It knows strings, not regular expression literals:
// engine.js's have no quotes or slashes that would mislead it.
func jsWithoutComments(js string) string {
	b := []byte(js)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"' || b[i] == '\'' || b[i] == '`':
			q := b[i]
			for i++; i < len(b) && b[i] != q; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			end := strings.Index(string(b[i+2:]), "*/")
			if end < 0 {
				end = len(b) - i - 4
			}
			for k := i; k < i+end+4; k++ {
				b[k] = ' '
			}
		}
	}
	return string(b)
}

// jsBlock is js from its first '{' to the matching '}' (js without
// comments).
func jsBlock(js string) (string, error) {
	start := strings.IndexByte(js, '{')
	depth := 0
	for i := start; i >= 0 && i < len(js); i++ {
		switch js[i] {
		case '"', '\'', '`':
			q := js[i]
			for i++; i < len(js) && js[i] != q; i++ {
				if js[i] == '\\' {
					i++
				}
			}
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return js[start : i+1], nil
			}
		}
	}
	return "", fmt.Errorf("unbalanced braces after %.40q", js)
}

// TestDocsListProtocol: the control message table of
// docs/client-engine.md has a row for every message, in its direction,
// naming each of its fields and no others (an embedded struct by its type,
// its fields as the row likes).
func TestDocsListProtocol(t *testing.T) {
	doc, err := os.ReadFile("../../docs/client-engine.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docProtocolRows(string(doc))
	if len(rows) == 0 {
		t.Fatal("docs/client-engine.md: no control message table")
	}
	check := func(dir string, m any, k msgKind) {
		row, ok := rows[k]
		if !ok {
			t.Errorf("docs/client-engine.md: no row for %q (%T)", k, m)
			return
		}
		if row.dir != dir {
			t.Errorf("docs/client-engine.md: %q is under %q, want %q", k, row.dir, dir)
		}
		own, embedded := jsonFields(reflect.TypeOf(m))
		for _, f := range own {
			if !slices.Contains(row.fields, f) {
				t.Errorf("docs/client-engine.md: %q row %q does not name its field %q", k, row.text, f)
			}
		}
		for typ, fs := range embedded {
			if !strings.Contains(row.line, typ) {
				t.Errorf("docs/client-engine.md: %q row %q does not name %s", k, row.text, typ)
			}
			own = append(own, fs...)
		}
		for _, f := range row.fields {
			if !slices.Contains(own, f) {
				t.Errorf("docs/client-engine.md: %q row %q names %q, which %T has not", k, row.text, f, m)
			}
		}
		delete(rows, k)
	}
	for _, m := range serverMsgs {
		check("server → client", m, m.serverKind())
	}
	for _, m := range clientMsgs {
		check("client → server", m, m.clientKind())
	}
	for k, row := range rows {
		t.Errorf("docs/client-engine.md: a row for %q (%q), which is no message", k, row.text)
	}
}

type docRow struct {
	dir, text, line string
	fields          []string
}

// docProtocolRows reads the table under "## Control messages": each row's
// first code span {"t":"kind", field, field:{…}, …}.
func docProtocolRows(doc string) map[msgKind]docRow {
	_, sec, _ := strings.Cut(doc, "## Control messages")
	sec, _, _ = strings.Cut(sec, "\n## ")
	span := regexp.MustCompile("`(\\{\"t\":\"(\\w+)\"[^`]*\\})`")
	rows := map[msgKind]docRow{}
	dir := ""
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		if d := strings.TrimSpace(cells[1]); d != "" {
			dir = d
		}
		m := span.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var fields []string
		depth, item := 0, ""
		inner := m[1][1 : len(m[1])-1]
		for _, r := range inner + "," {
			switch {
			case r == '{':
				depth++
			case r == '}':
				depth--
			case r == ',' && depth == 0:
				name, _, _ := strings.Cut(item, ":")
				if name = strings.Trim(strings.TrimSpace(name), `"`); name != "t" && name != "" {
					fields = append(fields, name)
				}
				item = ""
			case depth == 0:
				item += string(r)
			}
		}
		rows[msgKind(m[2])] = docRow{dir: dir, text: m[1], line: line, fields: fields}
	}
	return rows
}

// jsonFields are t's JSON field names, and those of its embedded structs
// by the struct's type.
func jsonFields(t reflect.Type) (own []string, embedded map[string][]string) {
	embedded = map[string][]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" {
			sub, _ := jsonFields(f.Type)
			embedded[f.Type.String()] = sub
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" {
			own = append(own, name)
		}
	}
	return own, embedded
}
