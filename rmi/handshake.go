package rmi

import (
	"bufio"
	"context"
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
const protocolVersion uint8 = 1

const (
	nonceLen   = 32
	maxNameLen = 256
)

// hsHello is the server's first frame.
type hsHello struct {
	_struct bool `codec:",toarray"` //nolint:unused // codec directive
	Version uint8
	Nonce   []byte
}

// hsClient is the client's answer: its proof of the secret, name and nonce.
type hsClient struct {
	_struct bool `codec:",toarray"` //nolint:unused // codec directive
	Version uint8
	Name    string
	Nonce   []byte
	MAC     []byte
}

// hsServer is the server's verdict and, when OK, its own proof.
type hsServer struct {
	_struct bool `codec:",toarray"` //nolint:unused // codec directive
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
	var l [4]byte
	for _, f := range fields {
		binary.BigEndian.PutUint32(l[:], uint32(len(f)))
		h.Write(l[:])
		h.Write(f)
	}
	return h.Sum(nil)
}

func clientMAC(secret, sNonce, cNonce []byte, cName string) []byte {
	return hsMAC(secret, "cbrmi client", []byte{protocolVersion}, sNonce, cNonce, []byte(cName))
}

func serverMAC(secret, sNonce, cNonce []byte, cName, sName string) []byte {
	return hsMAC(secret, "cbrmi server", []byte{protocolVersion}, sNonce, cNonce, []byte(cName), []byte(sName))
}

func validName(s string) bool { return s != "" && len(s) <= maxNameLen }

// handshake authenticates nc in either role and returns the peer's name. It
// gives up after HandshakeTimeout or when ctx is done, whichever is first.
// br must be the reader the connection keeps using afterwards: the peer may
// send its first call right behind the last handshake frame.
func (n *Node) handshake(ctx context.Context, nc net.Conn, br *bufio.Reader, client bool) (string, error) {
	deadline := time.Now().Add(n.cfg.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nc.SetDeadline(deadline); err != nil {
		return "", fmt.Errorf("rmi: handshake: %w", err)
	}
	// Unblock reads/writes when ctx ends (e.g. node closing).
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	var (
		peer string
		err  error
	)
	if client {
		peer, err = n.handshakeClient(nc, br)
	} else {
		peer, err = n.handshakeServer(nc, br)
	}
	if !stop() {
		// The AfterFunc ran (or is running) and may have poisoned the deadline.
		if err == nil {
			err = fmt.Errorf("rmi: handshake: %w", context.Cause(ctx))
		}
		return "", err
	}
	if err != nil {
		return "", err
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return "", fmt.Errorf("rmi: handshake: %w", err)
	}
	return peer, nil
}

func (n *Node) handshakeServer(nc net.Conn, br *bufio.Reader) (string, error) {
	sNonce := make([]byte, nonceLen)
	rand.Read(sNonce) // never fails (crypto/rand panics instead)
	if err := hsWrite(nc, &hsHello{Version: protocolVersion, Nonce: sNonce}); err != nil {
		return "", err
	}
	var hc hsClient
	if err := hsRead(br, &hc); err != nil {
		return "", err
	}
	if hc.Version != protocolVersion {
		_ = hsWrite(nc, &hsServer{Reason: "version"})
		return "", fmt.Errorf("%w: peer protocol version %d, want %d", ErrProtocol, hc.Version, protocolVersion)
	}
	if len(hc.Nonce) != nonceLen || !validName(hc.Name) {
		return "", fmt.Errorf("%w: malformed handshake", ErrProtocol)
	}
	if !hmac.Equal(hc.MAC, clientMAC(n.cfg.Secret, sNonce, hc.Nonce, hc.Name)) {
		// Tell the client why before closing so it reports ErrAuth, not EOF.
		_ = hsWrite(nc, &hsServer{Reason: "auth"})
		return "", fmt.Errorf("%w: client %q did not prove the shared secret", ErrAuth, hc.Name)
	}
	err := hsWrite(nc, &hsServer{OK: true, Name: n.cfg.Name,
		MAC: serverMAC(n.cfg.Secret, sNonce, hc.Nonce, hc.Name, n.cfg.Name)})
	return hc.Name, err
}

func (n *Node) handshakeClient(nc net.Conn, br *bufio.Reader) (string, error) {
	var hello hsHello
	if err := hsRead(br, &hello); err != nil {
		return "", err
	}
	if hello.Version != protocolVersion {
		return "", fmt.Errorf("%w: server protocol version %d, want %d", ErrProtocol, hello.Version, protocolVersion)
	}
	if len(hello.Nonce) != nonceLen {
		return "", fmt.Errorf("%w: malformed handshake", ErrProtocol)
	}
	cNonce := make([]byte, nonceLen)
	rand.Read(cNonce)
	if err := hsWrite(nc, &hsClient{Version: protocolVersion, Name: n.cfg.Name, Nonce: cNonce,
		MAC: clientMAC(n.cfg.Secret, hello.Nonce, cNonce, n.cfg.Name)}); err != nil {
		return "", err
	}
	var hs hsServer
	if err := hsRead(br, &hs); err != nil {
		return "", err
	}
	switch {
	case !hs.OK && hs.Reason == "auth":
		return "", fmt.Errorf("%w: server rejected our secret", ErrAuth)
	case !hs.OK:
		return "", fmt.Errorf("%w: server refused handshake: %q", ErrProtocol, hs.Reason)
	case !validName(hs.Name):
		return "", fmt.Errorf("%w: malformed handshake", ErrProtocol)
	case !hmac.Equal(hs.MAC, serverMAC(n.cfg.Secret, hello.Nonce, cNonce, n.cfg.Name, hs.Name)):
		return "", fmt.Errorf("%w: server %q did not prove the shared secret", ErrAuth, hs.Name)
	}
	return hs.Name, nil
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
