package cdpgate

import "encoding/json"

// onEvent decides whether an event from Chromium reaches the client,
// recording what it tells about owned targets and sessions. Chromium
// reports every context's targets on the gate's connection, so the
// default is to drop: a browser-level event passes only if named here, a
// session's only if the session is owned.
func (g *gate) onEvent(m *upMessage) bool {
	if m.SessionID != "" && !g.own.session(m.SessionID) {
		return false
	}
	switch m.Method {
	case "Target.attachedToTarget":
		return g.onAttached(m)
	case "Target.detachedFromTarget":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(m.Params, &p) != nil || !g.own.session(p.SessionID) {
			return false
		}
		g.own.removeSession(p.SessionID)
		return true
	case "Target.targetCreated", "Target.targetInfoChanged":
		var p struct {
			TargetInfo targetInfo `json:"targetInfo"`
		}
		return json.Unmarshal(m.Params, &p) == nil && g.own.claimTarget(p.TargetInfo.TargetID, p.TargetInfo.BrowserContextID)
	case "Target.targetDestroyed", "Target.targetCrashed":
		var p struct {
			TargetID string `json:"targetId"`
		}
		if json.Unmarshal(m.Params, &p) != nil || !g.own.target(p.TargetID) {
			return false
		}
		if m.Method == "Target.targetDestroyed" {
			g.own.removeTarget(p.TargetID)
		}
		return true
	case "Target.receivedMessageFromTarget":
		return false // non-flat sessions are never allowed
	case "Browser.downloadWillBegin", "Browser.downloadProgress":
		return m.SessionID != "" || g.ownDownload(m)
	}
	return m.SessionID != ""
}

// onAttached passes an attachment to an owned target and records its
// session. Any other is undone: resumed first if it waits for the
// debugger (a detach alone leaves it paused, measured), then detached
// where it was attached (browser level or the parent session).
func (g *gate) onAttached(m *upMessage) bool {
	var p struct {
		SessionID          string     `json:"sessionId"`
		TargetInfo         targetInfo `json:"targetInfo"`
		WaitingForDebugger bool       `json:"waitingForDebugger"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID == "" {
		g.log.Warn().Err(err).Msg("bad Target.attachedToTarget")
		return false
	}
	if g.own.claimTarget(p.TargetInfo.TargetID, p.TargetInfo.BrowserContextID) {
		g.own.addSession(p.SessionID, p.WaitingForDebugger)
		return true
	}
	g.log.Debug().Str("target", p.TargetInfo.TargetID).Str("type", p.TargetInfo.Type).
		Bool("waiting", p.WaitingForDebugger).Msg("detaching from a target outside the session")
	if p.WaitingForDebugger {
		g.send(p.SessionID, "Runtime.runIfWaitingForDebugger", nil)
	}
	g.send(m.SessionID, "Target.detachFromTarget", map[string]any{"sessionId": p.SessionID})
	return false
}

// ownDownload passes browser-level download events of owned pages: a
// download begins in a frame, and the frame of a page is its target id
// (downloads begun in a subframe are not reported).
func (g *gate) ownDownload(m *upMessage) bool {
	var p struct {
		FrameID string `json:"frameId"`
		GUID    string `json:"guid"`
		State   string `json:"state"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.GUID == "" {
		return false
	}
	if m.Method == "Browser.downloadWillBegin" {
		return g.own.target(p.FrameID) && g.own.download(p.GUID, true, false)
	}
	return g.own.download(p.GUID, false, p.State == "completed" || p.State == "canceled")
}
