package engine

// Holding input for a migration. Between the migration's snapshot and the
// moment the old copy lets its clients go ({"t":"moved"}) the restore on
// the new worker takes a second or more, and a user who keeps typing would
// type into a page that is about to be dropped. So the snapshot is taken
// with the browser's input held (the Host's gate): the clients are told
// ({"t":"hold"}, AnnounceHold) and keep what they type; input already on
// its way is sent back to its client ({"t":"held","input":…}) to be sent
// again; and once they reconnect to the new copy they send it all there,
// in order. A hold that outlasts its bound (the move failed) ends with
// {"t":"resume"} (AnnounceResume): the clients send what they kept here.

// A hold's messages, encoded once: they go to every client of a browser.
var (
	holdJSON   = encode(holdMsg{})
	resumeJSON = encode(resumeMsg{})
)

// AnnounceHold tells every client that the browser's input is held: the
// Host's gate is already closed.
func (h *Hub) AnnounceHold() { h.broadcast(holdJSON) }

// AnnounceResume tells every client that a hold ended here: they send
// what they kept.
func (h *Hub) AnnounceResume() { h.broadcast(resumeJSON) }

// Closed reports whether the hub ended (the browser closed, was released
// or moved).
func (h *Hub) Closed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// take dispatches a client's input event, or, while the browser's input
// is held, sends it back to the client (raw is the client's message).
func (in *hubInput) take(c *client, m inputMsg, raw []byte) {
	in.host.Input(func(held bool) {
		if held {
			c.enqueue(encode(heldMsg{Input: raw}))
			return
		}
		in.dispatch(c, m.InputEvent)
	})
}
