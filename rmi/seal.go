package rmi

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frameCipher seals or opens the frames of one direction of a connection
// with AES-256-GCM. The nonce is the frame's index in that direction, so a
// frame opens only at its own position: a replayed, dropped, reordered or
// reflected (other direction, other key) frame fails authentication. Each
// cipher is used by one goroutine only (the writer or the reader).
type frameCipher struct {
	aead cipher.AEAD // nil: plaintext (benchmarks only, see plaintextFrames)
	ctr  uint64      // index of the next frame
	buf  []byte      // writer: reused output buffer
	// Scratch space kept here so it does not escape to the heap per frame.
	nbuf [12]byte
	hdr  [4]byte
}

// plaintextFrames turns sealing off for connections made afterwards; only
// tests set it, to measure what sealing costs (export_test.go).
var plaintextFrames bool

func newFrameCipher(key []byte) (*frameCipher, error) {
	if plaintextFrames {
		return &frameCipher{}, nil
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &frameCipher{aead: aead}, nil
}

// overhead is how much longer a sealed body is than its plaintext.
func (f *frameCipher) overhead() int {
	if f.aead == nil {
		return 0
	}
	return f.aead.Overhead()
}

func (f *frameCipher) nonce() ([]byte, error) {
	if f.ctr == ^uint64(0) {
		// 2^64 frames: unreachable in practice, but a nonce must never repeat.
		return nil, errors.New("rmi: frame counter exhausted")
	}
	binary.BigEndian.PutUint64(f.nbuf[4:], f.ctr)
	f.ctr++
	return f.nbuf[:], nil
}

// write seals body and writes it as one frame; the length prefix is
// authenticated too (additional data).
func (f *frameCipher) write(w *bufio.Writer, body []byte) error {
	if f.aead == nil {
		return writeFrame(w, body)
	}
	nonce, err := f.nonce()
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(f.hdr[:], uint32(len(body)+f.aead.Overhead()))
	f.buf = f.aead.Seal(append(f.buf[:0], f.hdr[:]...), nonce, body, f.hdr[:])
	_, err = w.Write(f.buf)
	if cap(f.buf) > 64<<10 {
		f.buf = nil // do not pin a large frame's buffer
	}
	return err
}

// read reads one frame of at most max plaintext bytes and opens it. Any
// failure is fatal for the connection.
func (f *frameCipher) read(r io.Reader, max int) ([]byte, error) {
	body, err := readFrame(r, max+f.overhead())
	if err != nil || f.aead == nil {
		return body, err
	}
	idx := f.ctr
	nonce, err := f.nonce()
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(f.hdr[:], uint32(len(body)))
	plain, err := f.aead.Open(body[:0], nonce, body, f.hdr[:])
	if err != nil {
		return nil, fmt.Errorf("%w: frame %d failed authentication (tampered, replayed, reordered, reflected or not sealed)", ErrProtocol, idx)
	}
	if len(plain) == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrProtocol)
	}
	return plain, nil
}
