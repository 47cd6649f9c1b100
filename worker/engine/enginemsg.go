package engine

import (
	"encoding/json"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// The client engine's control messages (docs/client-engine.md): JSON
// objects whose "t" is their kind. Each message is a type of its own, so
// none can be sent with another's fields or a misspelt kind; the contract
// test (enginemsg_test.go) holds engine.js and the docs to these types.

// msgKind is a control message's "t".
type msgKind string

// Worker to client engine.
const (
	kindHello  msgKind = "hello"
	kindPage   msgKind = "page"
	kindPong   msgKind = "pong"
	kindRole   msgKind = "role"
	kindClosed msgKind = "closed"
	kindMoved  msgKind = "moved"
	kindError  msgKind = "error"
	kindHold   msgKind = "hold"
	kindHeld   msgKind = "held"
	kindResume msgKind = "resume"
	kindDialog msgKind = "dialog"
	// kindDialogClosed: answered (by anyone), timed out, or gone.
	kindDialogClosed msgKind = "dialogClosed"
	kindClipboard    msgKind = "clipboard"
	kindFileChooser  msgKind = "fileChooser"
	kindDownload     msgKind = "download"
	kindEditable     msgKind = "editable"
	kindTakeover     msgKind = "takeover"
)

// Client engine to worker.
const (
	kindPing    msgKind = "ping"
	kindAck     msgKind = "ack"
	kindInput   msgKind = "input"
	kindRefresh msgKind = "refresh"
	kindAnswer  msgKind = "answer"
	// kindHandBack: a person hands an automation session's browser back.
	kindHandBack msgKind = "handBack"
	// kindCaps: what the engine can do, sent once the socket opens.
	kindCaps msgKind = "caps"
)

// serverMsg is a message the worker sends to client engines (encode).
type serverMsg interface{ serverKind() msgKind }

// clientMsg is a message client engines send to the worker.
type clientMsg interface{ clientKind() msgKind }

// helloMsg opens every connection: what the client is connected to.
type helloMsg struct {
	Browser  string        `json:"browser,omitempty"`
	Instance string        `json:"instance,omitempty"`
	App      string        `json:"app,omitempty"`
	Worker   string        `json:"worker,omitempty"`
	Page     *browser.Page `json:"page,omitempty"`
	ReadOnly bool          `json:"readOnly,omitempty"`
	// NoFrames: the browser renders nothing (the "none" runtime), so the
	// client is live without waiting for a first frame.
	NoFrames bool `json:"noFrames,omitempty"`
}

// pageMsg: the page navigated or its title changed.
type pageMsg struct {
	URL   string `json:"url,omitempty"`
	Title string `json:"title,omitempty"`
}

// pongMsg answers a pingMsg with its fields.
type pongMsg struct {
	Seq  int64  `json:"seq,omitempty"`
	Data string `json:"data,omitempty"`
}

// roleMsg: the owner changed the user's role while connected.
type roleMsg struct {
	ReadOnly bool `json:"readOnly,omitempty"`
}

// closedMsg ends a connection for good; Reload is a URL that gives the
// user a new browser ("" = none).
type closedMsg struct {
	Reason string `json:"reason,omitempty"`
	Reload string `json:"reload,omitempty"`
}

// movedMsg: the instance lives on another worker now, at the same URL.
type movedMsg struct {
	Reason string `json:"reason,omitempty"`
}

// errorMsg reports a message the worker could not take.
type errorMsg struct {
	Message string `json:"message,omitempty"`
}

// holdMsg: a migration holds the browser's input; the engine keeps it.
type holdMsg struct{}

// heldMsg gives back an input message that came during a hold, as the
// client sent it.
type heldMsg struct {
	Input json.RawMessage `json:"input"`
}

// resumeMsg ends a hold that moved nothing.
type resumeMsg struct{}

// dialogMsg: the page opened a dialog and waits for its answer.
type dialogMsg struct {
	ID      uint64 `json:"id"`
	Kind    string `json:"kind"` // alert, confirm, prompt, beforeunload, auth (a site's sign-in: Message its realm)
	Message string `json:"message,omitempty"`
	Default string `json:"default,omitempty"` // a prompt's default text
	URL     string `json:"url,omitempty"`     // of the document that asks
}

// dialogClosedMsg: dialog ID is gone; Accepted says how it was answered.
type dialogClosedMsg struct {
	ID       uint64 `json:"id"`
	Accepted bool   `json:"accepted,omitempty"`
}

// clipboardMsg: the page copied Text after this viewer's gesture; it goes
// on the user's clipboard.
type clipboardMsg struct {
	Text string `json:"text"`
}

// fileChooserMsg: the page opened a file picker after this viewer's
// gesture; the user's chosen files go up over HTTP (Files.Upload). Refused
// says why the picker gets no file instead.
type fileChooserMsg struct {
	ID       uint64 `json:"id"`
	Multiple bool   `json:"multiple,omitempty"`
	Accept   string `json:"accept,omitempty"`
	// MaxBytes is the browser's limit for its files: the engine refuses
	// a choice over it without sending it.
	MaxBytes int64  `json:"maxBytes,omitempty"`
	Refused  string `json:"refused,omitempty"`
}

// downloadMsg: a download of the page began, progressed or ended (State:
// inProgress, completed, canceled, or refused with Error); a completed
// one is fetched at files/down/<ID> under the Browser URL.
type downloadMsg struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Total    int64  `json:"total,omitempty"`
	Received int64  `json:"received,omitempty"`
	State    string `json:"state"`
	Error    string `json:"error,omitempty"`
}

// editableMsg: whether the page's focused element takes text (On), as it
// changes and on joining; a phone's keyboard is shown only then.
type editableMsg struct {
	On bool `json:"on"`
}

// takeoverMsg: a person (User) drives an automation session's browser and
// its automation waits; User "" when it is handed back.
type takeoverMsg struct {
	User string `json:"user"`
}

// handBackMsg: the viewer hands the browser back to its automation.
type handBackMsg struct{}

func (takeoverMsg) serverKind() msgKind { return kindTakeover }
func (handBackMsg) clientKind() msgKind { return kindHandBack }

func (helloMsg) serverKind() msgKind  { return kindHello }
func (pageMsg) serverKind() msgKind   { return kindPage }
func (pongMsg) serverKind() msgKind   { return kindPong }
func (roleMsg) serverKind() msgKind   { return kindRole }
func (closedMsg) serverKind() msgKind { return kindClosed }
func (movedMsg) serverKind() msgKind  { return kindMoved }
func (errorMsg) serverKind() msgKind  { return kindError }
func (holdMsg) serverKind() msgKind   { return kindHold }
func (heldMsg) serverKind() msgKind   { return kindHeld }
func (resumeMsg) serverKind() msgKind { return kindResume }
func (dialogMsg) serverKind() msgKind { return kindDialog }
func (dialogClosedMsg) serverKind() msgKind {
	return kindDialogClosed
}
func (clipboardMsg) serverKind() msgKind   { return kindClipboard }
func (fileChooserMsg) serverKind() msgKind { return kindFileChooser }
func (downloadMsg) serverKind() msgKind    { return kindDownload }
func (editableMsg) serverKind() msgKind    { return kindEditable }

// pingMsg asks for a pongMsg; engines send it when the socket goes quiet.
type pingMsg struct {
	Seq  int64  `json:"seq"`
	Data string `json:"data"`
}

// ackMsg: frames up to Seq are drawn (pace.go).
type ackMsg struct {
	Seq int64 `json:"seq"`
}

// inputMsg is one input event, its fields beside "t".
type inputMsg struct {
	browser.InputEvent
}

// refreshMsg: the engine got no frame for a while.
type refreshMsg struct{}

// capsMsg: what the engine can do. Tiles: it composes tile updates
// (tiles.go); an engine that never says gets whole frames.
type capsMsg struct {
	Tiles bool `json:"tiles"`
}

// answerMsg answers the page's dialog Dialog: Accept is OK (or Leave, or
// Sign in, or Allow), Value a prompt's text or a sign-in's user name,
// Password a sign-in's password, Position where the user is (a
// geolocation permission allowed, if the user's browser said).
type answerMsg struct {
	Dialog   uint64          `json:"dialog"`
	Accept   bool            `json:"accept"`
	Value    string          `json:"value"`
	Password string          `json:"password"`
	Position *positionFields `json:"position"`
}

// positionFields are a position as the engine sends it.
type positionFields struct {
	Latitude  float64 `json:"latitude"`
	Longitude float64 `json:"longitude"`
	Accuracy  float64 `json:"accuracy"`
}

func (pingMsg) clientKind() msgKind    { return kindPing }
func (ackMsg) clientKind() msgKind     { return kindAck }
func (inputMsg) clientKind() msgKind   { return kindInput }
func (refreshMsg) clientKind() msgKind { return kindRefresh }
func (answerMsg) clientKind() msgKind  { return kindAnswer }
func (capsMsg) clientKind() msgKind    { return kindCaps }

// clientEnvelope decodes any client message in one pass (input comes many
// times a second); its kind says which message's fields it holds, and the
// accessors give that message.
type clientEnvelope struct {
	T    msgKind `json:"t"`
	Seq  int64   `json:"seq"`
	Data string  `json:"data"`
	// An answer's (names no input event uses).
	Dialog   uint64          `json:"dialog"`
	Accept   bool            `json:"accept"`
	Value    string          `json:"value"`
	Password string          `json:"password"`
	Position *positionFields `json:"position"`
	// A caps message's.
	Tiles bool `json:"tiles"`
	browser.InputEvent
}

func (e *clientEnvelope) ping() pingMsg   { return pingMsg{Seq: e.Seq, Data: e.Data} }
func (e *clientEnvelope) ack() ackMsg     { return ackMsg{Seq: e.Seq} }
func (e *clientEnvelope) input() inputMsg { return inputMsg{e.InputEvent} }
func (e *clientEnvelope) answer() answerMsg {
	return answerMsg{Dialog: e.Dialog, Accept: e.Accept, Value: e.Value, Password: e.Password, Position: e.Position}
}

// encode is m as sent: {"t":kind, then m's fields}, as one object.
func encode(m serverMsg) []byte {
	var body []byte
	if h, ok := m.(heldMsg); ok {
		// The client's bytes go back as they came, not re-encoded.
		body = append(append([]byte(`{"input":`), h.Input...), '}')
	} else {
		var err error
		if body, err = json.Marshal(m); err != nil {
			panic(err) // only our own message types come here
		}
	}
	k := m.serverKind()
	out := make([]byte, 0, len(`{"t":"",`)+len(k)+len(body))
	out = append(append(append(out, `{"t":"`...), k...), '"')
	if len(body) > len("{}") {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}
