package rmi

import (
	"bufio"
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"time"
)

// protocolVersion is sent in the handshake; peers with another version are
// refused so a mixed-version cluster fails loudly instead of misparsing.
// Version 2 added the declared role and sealed (AEAD) frames.
const protocolVersion uint8 = 2

const (
	nonceLen   = 32
	maxNameLen = 256
)

// hsHello is the server's first frame.
type hsHello struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool `codec:",toarray"`
	Version uint8
	Nonce   []byte
}

// hsClient is the client's answer: its proof of the secret, name, nonce and
// role. Role is last so a version-1 client's shorter array still decodes and
// is refused for its version rather than as garbage.
type hsClient struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool `codec:",toarray"`
	Version uint8
	Name    string
	Nonce   []byte
	MAC     []byte
	Role    string
}

// hsServer is the server's verdict and, when OK, its own proof.
type hsServer struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool `codec:",toarray"`
	OK      bool
	Reason  string // "auth" or "version" when !OK
	Name    string
	MAC     []byte
}

// hsMAC is HMAC-SHA256 over a role label and length-prefixed fields; the
// length prefixes keep field boundaries unambiguous (no "ab"+"c" == "a"+"bc").
func hsMAC(secret []byte, label string, fields ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	h.Write(lenPrefixed(fields...))
	return h.Sum(nil)
}

func lenPrefixed(fields ...[]byte) []byte {
	var b []byte
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// validRole: roles are short names chosen by the deployment ("worker").
func validRole(s string) bool { return s != "" && len(s) <= 64 }

func clientMAC(secret, sNonce, cNonce []byte, cName, role string) []byte {
	return hsMAC(secret, "cbrmi client", []byte{protocolVersion}, sNonce, cNonce, []byte(cName), []byte(role))
}

func serverMAC(secret, sNonce, cNonce []byte, cName, role, sName string) []byte {
	return hsMAC(secret, "cbrmi server", []byte{protocolVersion}, sNonce, cNonce, []byte(cName), []byte(role), []byte(sName))
}

func validName(s string) bool { return s != "" && len(s) <= maxNameLen }

// hsResult is what a successful handshake established.
type hsResult struct {
	peer, role string // role: the client's authenticated role (server side only)
	byCluster  bool   // the client proved the cluster secret, not a role key
	byName     bool   // the client proved the key bound to its name (Config.NameSecret)
	tx, rx     *frameCipher
}

// sessionCiphers derives the two per-direction frame keys from the key both
// sides proved, both nonces and the authenticated names and role: a fresh
// pair per connection, so frames of one connection mean nothing on another
// and a frame reflected back to its sender does not open.
func sessionCiphers(key, sNonce, cNonce []byte, cName, role, sName string, client bool) (tx, rx *frameCipher, err error) {
	salt := append(append([]byte{}, sNonce...), cNonce...)
	derive := func(dir string) (*frameCipher, error) {
		info := lenPrefixed([]byte("cbrmi frames "+dir), []byte{protocolVersion}, []byte(cName), []byte(role), []byte(sName))
		k, err := hkdf.Key(sha256.New, key, salt, string(info), 32)
		if err != nil {
			return nil, err
		}
		return newFrameCipher(k)
	}
	c2s, err := derive("client->server")
	if err != nil {
		return nil, nil, fmt.Errorf("rmi: handshake: derive keys: %w", err)
	}
	s2c, err := derive("server->client")
	if err != nil {
		return nil, nil, fmt.Errorf("rmi: handshake: derive keys: %w", err)
	}
	if client {
		return c2s, s2c, nil
	}
	return s2c, c2s, nil
}

// handshake authenticates nc in either role and derives the connection's
// frame keys. It gives up after HandshakeTimeout or when ctx is done,
// whichever is first. br must be the reader the connection keeps using
// afterwards: the peer may send its first call right behind the last
// handshake frame.
func (n *Node) handshake(ctx context.Context, nc net.Conn, br *bufio.Reader, client bool) (hsResult, error) {
	deadline := time.Now().Add(n.cfg.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nc.SetDeadline(deadline); err != nil {
		return hsResult{}, fmt.Errorf("rmi: handshake: %w", err)
	}
	// Unblock reads/writes when ctx ends (e.g. node closing).
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	var (
		res hsResult
		err error
	)
	if client {
		res, err = n.handshakeClient(nc, br)
	} else {
		res, err = n.handshakeServer(nc, br)
	}
	if !stop() {
		// The AfterFunc ran (or is running) and may have poisoned the deadline.
		if err == nil {
			err = fmt.Errorf("rmi: handshake: %w", context.Cause(ctx))
		}
		return hsResult{}, err
	}
	if err != nil {
		return hsResult{}, err
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return hsResult{}, fmt.Errorf("rmi: handshake: %w", err)
	}
	return res, nil
}

// clientKey is one key a client may prove and what it proves.
type clientKey struct {
	k             []byte
	name, cluster bool
}

// clientKeys are the keys a client named name declaring role may prove,
// best first: the key bound to its name, the role's own key, then the
// cluster secret (accepted for every role).
func (n *Node) clientKeys(role, name string) []clientKey {
	var keys []clientKey
	if n.cfg.NameSecret != nil {
		if k := n.cfg.NameSecret(role, name); len(k) >= MinSecretLen {
			keys = append(keys, clientKey{k: k, name: true})
		}
	}
	if k := n.cfg.RoleSecrets[role]; k != nil {
		keys = append(keys, clientKey{k: k})
	}
	return append(keys, clientKey{k: n.cfg.Secret, cluster: true})
}

func (n *Node) handshakeServer(nc net.Conn, br *bufio.Reader) (hsResult, error) {
	sNonce := make([]byte, nonceLen)
	rand.Read(sNonce) // never fails (crypto/rand panics instead)
	if err := hsWrite(nc, &hsHello{Version: protocolVersion, Nonce: sNonce}); err != nil {
		return hsResult{}, err
	}
	var hc hsClient
	if err := hsRead(br, &hc); err != nil {
		return hsResult{}, err
	}
	if hc.Version != protocolVersion {
		_ = hsWrite(nc, &hsServer{Reason: "version"})
		return hsResult{}, fmt.Errorf("%w: peer protocol version %d, want %d (upgrade the peer)", ErrProtocol, hc.Version, protocolVersion)
	}
	if len(hc.Nonce) != nonceLen || !validName(hc.Name) || !validRole(hc.Role) {
		return hsResult{}, fmt.Errorf("%w: malformed handshake", ErrProtocol)
	}
	var proved *clientKey
	keys := n.clientKeys(hc.Role, hc.Name)
	for i, k := range keys {
		if hmac.Equal(hc.MAC, clientMAC(k.k, sNonce, hc.Nonce, hc.Name, hc.Role)) {
			proved = &keys[i]
			break
		}
	}
	if proved == nil {
		// Tell the client why before closing so it reports ErrAuth, not EOF.
		_ = hsWrite(nc, &hsServer{Reason: "auth"})
		what := "the cluster secret"
		if len(keys) > 1 {
			what = "the " + hc.Role + " key or the cluster secret"
		}
		return hsResult{}, fmt.Errorf("%w: client %q (role %q) did not prove %s", ErrAuth, hc.Name, hc.Role, what)
	}
	key := proved.k
	tx, rx, err := sessionCiphers(key, sNonce, hc.Nonce, hc.Name, hc.Role, n.cfg.Name, false)
	if err != nil {
		return hsResult{}, err
	}
	err = hsWrite(nc, &hsServer{OK: true, Name: n.cfg.Name,
		MAC: serverMAC(key, sNonce, hc.Nonce, hc.Name, hc.Role, n.cfg.Name)})
	return hsResult{peer: hc.Name, role: hc.Role, byCluster: proved.cluster, byName: proved.name, tx: tx, rx: rx}, err
}

func (n *Node) handshakeClient(nc net.Conn, br *bufio.Reader) (hsResult, error) {
	var hello hsHello
	if err := hsRead(br, &hello); err != nil {
		return hsResult{}, err
	}
	if hello.Version != protocolVersion {
		return hsResult{}, fmt.Errorf("%w: server protocol version %d, want %d (upgrade the server)", ErrProtocol, hello.Version, protocolVersion)
	}
	if len(hello.Nonce) != nonceLen {
		return hsResult{}, fmt.Errorf("%w: malformed handshake", ErrProtocol)
	}
	cNonce := make([]byte, nonceLen)
	rand.Read(cNonce)
	role := n.cfg.Role
	secret := *n.dialKey.Load()
	if err := hsWrite(nc, &hsClient{Version: protocolVersion, Name: n.cfg.Name, Nonce: cNonce, Role: role,
		MAC: clientMAC(secret, hello.Nonce, cNonce, n.cfg.Name, role)}); err != nil {
		return hsResult{}, err
	}
	var hs hsServer
	if err := hsRead(br, &hs); err != nil {
		return hsResult{}, err
	}
	switch {
	case !hs.OK && hs.Reason == "auth":
		return hsResult{}, fmt.Errorf("%w: server rejected our key for role %q", ErrAuth, role)
	case !hs.OK && hs.Reason == "version":
		return hsResult{}, fmt.Errorf("%w: server refused our protocol version %d", ErrProtocol, protocolVersion)
	case !hs.OK:
		return hsResult{}, fmt.Errorf("%w: server refused handshake: %q", ErrProtocol, hs.Reason)
	case !validName(hs.Name):
		return hsResult{}, fmt.Errorf("%w: malformed handshake", ErrProtocol)
	case !hmac.Equal(hs.MAC, serverMAC(secret, hello.Nonce, cNonce, n.cfg.Name, role, hs.Name)):
		return hsResult{}, fmt.Errorf("%w: server %q did not prove our key", ErrAuth, hs.Name)
	}
	tx, rx, err := sessionCiphers(secret, hello.Nonce, cNonce, n.cfg.Name, role, hs.Name, true)
	if err != nil {
		return hsResult{}, err
	}
	return hsResult{peer: hs.Name, tx: tx, rx: rx}, nil
}

func hsWrite(nc net.Conn, v any) error {
	body, err := marshal(v)
	if err != nil {
		return err
	}
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	if _, err := nc.Write(frame); err != nil {
		return fmt.Errorf("rmi: handshake write: %w", err)
	}
	return nil
}

func hsRead(br *bufio.Reader, v any) error {
	body, err := readFrame(br, handshakeMaxFrame)
	if err != nil {
		return fmt.Errorf("rmi: handshake read: %w", err)
	}
	if err := unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: handshake: %w", ErrProtocol, err)
	}
	return nil
}
