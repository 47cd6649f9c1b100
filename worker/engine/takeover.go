package engine

// Takeover of an automation session's browser (docs/automation.md): a
// person who may drive it acts, its automation client is told and waits;
// the engine shows who drives, and a Hand back button to those who may
// drive. The session's side (worker/httpserve) decides; the hub shows it
// and passes the button on. (Functions, not methods: Hub is at its size.)

// AnnounceTakeover tells h's viewers, now and as they join, that user
// drives the browser and its automation waits ("": handed back).
func AnnounceTakeover(h *Hub, user string) {
	if old := h.takenBy.Swap(&user); old != nil && *old == user {
		return
	}
	h.broadcast(encode(takeoverMsg{User: user}))
}

// handBack passes a viewer's Hand back on; a read-only viewer's is
// refused, and one with no takeover under way changes nothing.
func handBack(h *Hub, c *client) {
	if c.readOnly.Load() {
		c.enqueue(encode(errorMsg{Message: "read-only: you cannot hand this browser back"}))
		return
	}
	if by := h.takenBy.Load(); by == nil || *by == "" || h.cfg.OnHandBack == nil {
		return
	}
	h.cfg.OnHandBack(c.user)
}
