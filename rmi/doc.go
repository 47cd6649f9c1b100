// Package rmi is CloudBrowser's remote method invocation layer (the paper's
// "nodermi"): objects registered on a Node by name can be called from the
// other end of an authenticated TCP connection, in both directions over the
// same connection, and objects passed as arguments or results arrive as
// callable remote references.
//
// # Usage
//
//	n, _ := rmi.New(rmi.Config{Name: "master", Secret: secret, Logger: log})
//	_ = n.Register("master", masterAPI) // methods: func(ctx, args...) (R, error) or error
//	go n.Serve(ctx, ln)
//
//	// on a worker:
//	w, _ := rmi.New(rmi.Config{Name: "w-1", Secret: secret})
//	_ = w.Register("worker", workerAPI) // the master can call this back
//	cl := w.NewClient(addr, func(ctx context.Context, c *rmi.Conn) error {
//		return c.Call(ctx, "master", "Register", nil, info, rmi.Export(appManager))
//	})
//
// Inside a method, ConnFrom(ctx) is the connection the call came over.
//
// # Remote references
//
// A top-level argument or result of type *Exported (from Export) is added to
// the sending connection's export table under a fresh id and sent as a
// reference token. The receiver declares the parameter (or passes a reply
// target) of type *Ref and gets a stub bound to that connection; calling it
// calls the original object over the same connection. Only top-level
// arguments and results are converted: an *Exported or *Ref nested inside a
// struct, slice or map fails to encode. Each send creates a new export id.
// An exported object lives until the holder calls Ref.Release or the
// connection closes, whichever is first; after the connection closes every
// Ref on it fails with ErrClosed. A reference returned to a caller that
// passed a nil reply, or whose call was cancelled, is released automatically.
//
// # Wire protocol (version 1)
//
// Every frame is a 4-byte big-endian body length followed by a msgpack body
// (github.com/hashicorp/go-msgpack/v2/codec, one shared handle: WriteExt,
// RawToString, map[string]any for untyped maps, msgpack timestamp extension
// for time.Time). A body longer than Config.MaxFrame (default 8 MiB; 4 KiB
// during the handshake) or of length 0 closes the connection.
//
// Handshake (all msgpack arrays; MAC = HMAC-SHA256 with the shared secret over
// a label and length-prefixed fields):
//
//	S->C hello  [version, serverNonce(32)]
//	C->S client [version, clientName, clientNonce(32),
//	             MAC("cbrmi client", version, serverNonce, clientNonce, clientName)]
//	S->C server [ok, reason, serverName,
//	             MAC("cbrmi server", version, serverNonce, clientNonce, clientName, serverName)]
//
// MACs are compared in constant time. On a bad client MAC the server answers
// ok=false, reason="auth", logs the remote address and closes; the client
// then reports ErrAuth, as it does when the server's MAC is wrong. A version
// mismatch is refused with reason "version" (ErrProtocol). The whole
// exchange must finish within Config.HandshakeTimeout; no call is read before
// it succeeds.
//
// After the handshake every body is the array
//
//	[kind, seq, object, ref, method, timeout, args, result, err]
//
// with unused fields zero:
//
//	1 call    seq (caller's id, per direction), object name or ref (export id),
//	          method, timeout (caller's remaining ns, 0 = none), args: array of
//	          separately encoded values, each decoded into the callee's
//	          declared parameter type
//	2 reply   seq, result (encoded value, nil for error-only methods) or
//	          err [code, message]
//	3 cancel  seq: the caller gave up; the callee's ctx is cancelled
//	4 release seq = export id the receiver may drop
//
// A reference token is the msgpack fixext8 0xd7 0x01 followed by the 8-byte
// big-endian export id. The deadline travels as a relative timeout so the
// callee does not depend on synchronized clocks.
//
// # Errors and robustness
//
// Calls are multiplexed: one reader goroutine per connection, one writer
// goroutine that batches queued frames into one flush, and one goroutine per
// incoming call, at most 1024 in flight per connection; beyond that the
// reader stops reading (TCP back-pressure). Consequently, if all 1024 running
// methods wait on calls back to the same peer, the connection stalls until
// their contexts end.
//
// Protocol-level garbage (bad length, undecodable body, unknown kind, a
// malformed call) closes the connection with a logged error. A well-formed
// call naming an unknown object or method, or with the wrong number or types
// of arguments, gets an error reply (CodeNoObject, CodeNoMethod, CodeBadArgs)
// and the connection stays up. A panic in a method is recovered, logged with
// its stack and returned as CodePanic. An outgoing call larger than MaxFrame
// fails with ErrFrameTooLarge without touching the connection; an oversized
// reply becomes a CodeFrameTooLarge error reply.
//
// A failed remote method arrives as *RemoteError. If the callee's error
// chain has an error with an RMICode() string method, that code is sent;
// callers branch on RemoteError.Code. errors.Is works across the connection
// for the package's own kinds (ErrNoObject, ErrNoMethod, ErrBadArgs,
// ErrPanic, ErrFrameTooLarge) and for context.Canceled/DeadlineExceeded
// returned by the callee. A caller whose ctx ends gets ctx.Err() (wrapped).
//
// # Lifetimes
//
// Node.Close closes listeners, clients and connections and waits for every
// goroutine the node started, including running methods, whose contexts are
// cancelled: methods must honour ctx. Conn.Close waits for the connection's
// reader and writer but not for its running methods, so a method may close
// its own connection. There is no heartbeat: a silently dead peer is noticed
// through TCP keep-alive or the callers' deadlines.
//
// The limits above guard against garbage and accidents. An authenticated peer
// holds the cluster secret and is trusted with resources: nothing bounds the
// export table, the number of handshakes in progress, or the memory a
// maximal frame can decode into.
package rmi
