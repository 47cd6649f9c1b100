// Package rmi is CloudBrowser's remote method invocation layer (the paper's
// "nodermi"): objects registered on a Node by name can be called from the
// other end of an authenticated TCP connection, in both directions over the
// same connection, and objects passed as arguments or results arrive as
// callable remote references.
//
// # Usage
//
//	n, _ := rmi.New(rmi.Config{Name: "master", Secret: secret, Logger: log,
//		RoleSecrets: map[string][]byte{"worker": workerKey}})
//	_ = n.RegisterFor("master", masterAPI, "worker") // methods: func(ctx, args...) (R, error) or error
//	go n.Serve(ctx, ln)
//
//	// on a worker:
//	w, _ := rmi.New(rmi.Config{Name: "w-1", Role: "worker", Secret: workerKey})
//	_ = w.Register("worker", workerAPI) // the master can call this back
//	cl := w.NewClient(addr, func(ctx context.Context, c *rmi.Conn) error {
//		return c.Call(ctx, "master", "Register", nil, info, rmi.Export(appManager))
//	})
//
// Inside a method, ConnFrom(ctx) is the connection the call came over, and
// its PeerName the name the caller proved in the handshake.
//
// Who a call speaks for beyond that is the application's to say, once:
// Config.Identify runs before every incoming call's method with its
// connection and returns a peer value of the application's type (or an
// error that refuses the call), and the method reads it with
// PeerFrom[T](ctx). The master resolves a worker's connection to the
// worker registered on it this way.
//
// CloudBrowser does not spell object and method names at call sites: its
// objects are Go interfaces with typed stubs over Call in internal/contract
// (docs/architecture.md, "RMI contracts").
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
// # Roles
//
// A dialing node declares a role (Config.Role, default RoleCluster) and
// proves it with its Config.Secret. A server accepts, for a role, the key in
// Config.RoleSecrets[role] or its own Secret (the cluster secret, good for
// every role), and records the role on the connection (Conn.Role,
// Conn.ClusterSecret). Node.RegisterFor limits a named object to some roles
// (RoleCluster always allowed); other callers get a CodeForbidden error reply
// (ErrForbidden) and the refusal is logged. CloudBrowser's roles are "worker"
// and "proxy", with keys derived from the cluster secret by the master.
//
// # Wire protocol (version 2)
//
// Every frame is a 4-byte big-endian body length followed by the body. The
// handshake bodies are plain msgpack (github.com/hashicorp/go-msgpack/v2/codec,
// one shared handle: WriteExt, RawToString, map[string]any for untyped maps,
// msgpack timestamp extension for time.Time); every later body is sealed (see
// below). A plaintext body longer than Config.MaxFrame (default 8 MiB; 4 KiB
// during the handshake), a sealed one longer than MaxFrame+16, or a body of
// length 0 closes the connection.
//
// Handshake (all msgpack arrays; MAC = HMAC-SHA256 with key K over a label and
// length-prefixed fields; K is the client's role key or the cluster secret):
//
//	S->C hello  [version, serverNonce(32)]
//	C->S client [version, clientName, clientNonce(32),
//	             MAC("cbrmi client", version, serverNonce, clientNonce, clientName, role),
//	             role]
//	S->C server [ok, reason, serverName,
//	             MAC("cbrmi server", version, serverNonce, clientNonce, clientName, role, serverName)]
//
// MACs are compared in constant time. The server tries the role's key, then
// the cluster secret. If neither matches it answers ok=false, reason="auth",
// logs the remote address, the client name and role and closes; the client
// then reports ErrAuth, as it does when the server's MAC is wrong. A version
// mismatch is refused with reason "version" (ErrProtocol) and logged; role is
// the last field so a version-1 client's shorter array still decodes and is
// refused for its version, and a version-1 server's hello is refused by the
// client. The whole exchange must finish within Config.HandshakeTimeout; no
// call is read before it succeeds.
//
// # Sealed frames
//
// After the handshake both sides derive two keys with HKDF-SHA256 from K,
// salt serverNonce||clientNonce and info ("cbrmi frames client->server" or
// "... server->client", version, clientName, role, serverName, each
// length-prefixed): one per direction, fresh for every connection. Each body
// is sealed with AES-256-GCM under its direction's key; the 12-byte nonce is
// 4 zero bytes and the frame's 64-bit index in that direction (0, 1, ...);
// the additional data is the 4-byte length prefix. A frame therefore opens
// only at its own position, in its own direction, on its own connection:
// tampering, truncation, replay, reordering, reflection back to the sender,
// a frame from another connection, or a plaintext frame makes Open fail, and
// the receiver closes the connection and logs "frame N failed
// authentication". Neither side ever sends a frame it has not sealed, and the
// index never wraps (the connection fails first).
//
// The plaintext of a sealed frame is the array
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
// Protocol-level garbage (bad length, a frame that fails authentication,
// undecodable body, unknown kind, a malformed call) closes the connection
// with a logged error. A well-formed
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
// holds a role key or the cluster secret and is trusted with resources:
// nothing bounds the export table, the number of handshakes in progress, or
// the memory a maximal frame can decode into. Keys are symmetric: a holder of
// a role key can also play the server to clients of that role.
package rmi
