//go:build linux

// Package handoff passes an accepted client connection from a proxy to a
// worker on the same host: the proxy sends the socket itself (SCM_RIGHTS
// over a unix socket) with the request head it would have relayed, and the
// worker serves the connection as if the client had dialed it. After that
// the proxy is out of the data path: a WebSocket's bytes go from the client
// to the worker and back with no hop between them.
//
// One unix connection carries one handoff:
//
//	proxy → worker: uint32 big-endian N, then N bytes (the head and any
//	                bytes the client sent after it); the socket rides on
//	                the first write
//	worker → proxy: one byte, 'k' (taken)
//
// The worker accepts handoffs only from processes of its own user
// (SO_PEERCRED); what it then reads from the connection is an ordinary
// relayed request, which it authenticates as it does every request (the
// proxy's X-CB-Hop signature).
package handoff

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MaxPayload bounds a handoff's head and early bytes.
const MaxPayload = 64 << 10

// Timeout bounds one handoff, both ways.
const Timeout = 5 * time.Second

// errProbe: a connection that closed without a byte (CleanStale checking
// the socket is alive); not an error worth telling.
var errProbe = errors.New("handoff: probe")

var (
	// ErrRefused: the worker did not take the connection.
	ErrRefused = errors.New("handoff: refused")
	// ErrNotSocket: the connection has no descriptor to pass.
	ErrNotSocket = errors.New("handoff: connection has no socket")
	// ErrSent: the socket was sent but its receipt not acknowledged (a
	// worker that is stopped, say): it may still reach the worker, so the
	// caller must not serve it any other way.
	ErrSent = errors.New("handoff: sent but not acknowledged")
)

// Listener receives handed-off connections; it is a net.Listener, so an
// http.Server serves them as they come.
type Listener struct {
	ln    *net.UnixListener
	path  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	uid   int
	// onError is told of handoffs refused (bad peer, bad message).
	onError func(error)
}

// Listen listens on the unix socket path (removed first if left over;
// its directory should be private to the user). onError (nil = none) is
// told of every handoff refused: a bad peer or a bad message.
func Listen(path string, onError func(error)) (*Listener, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("handoff: listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	l := &Listener{ln: ln, path: path, conns: make(chan net.Conn), done: make(chan struct{}), uid: os.Getuid(), onError: onError}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops receiving; connections already handed over live on.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
	})
	l.wg.Wait()
	return nil
}

func (l *Listener) run() {
	defer l.wg.Done()
	for {
		uc, err := l.ln.AcceptUnix()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.receive(uc)
			if err != nil && l.onError != nil && !errors.Is(err, errProbe) {
				l.onError(err) // before the close the sender waits for
			}
			uc.Close()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// receive reads one handoff from uc and acknowledges it.
func (l *Listener) receive(uc *net.UnixConn) (net.Conn, error) {
	_ = uc.SetDeadline(time.Now().Add(Timeout))
	if err := l.checkPeer(uc); err != nil {
		return nil, err
	}
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for a few descriptors, to close extras
	n, oobn, _, _, err := uc.ReadMsgUnix(hdr[:], oob)
	if n == 0 && oobn == 0 && errors.Is(err, io.EOF) {
		return nil, errProbe
	}
	if err != nil {
		return nil, fmt.Errorf("handoff: read: %w", err)
	}
	fds, err := rights(oob[:oobn])
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if len(fds) != 1 {
		return fail(fmt.Errorf("handoff: %d descriptors, want 1", len(fds)))
	}
	if n < len(hdr) {
		if _, err := io.ReadFull(uc, hdr[n:]); err != nil {
			return fail(fmt.Errorf("handoff: read: %w", err))
		}
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > MaxPayload {
		return fail(fmt.Errorf("handoff: payload of %d bytes, at most %d", size, MaxPayload))
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(uc, payload); err != nil {
		return fail(fmt.Errorf("handoff: read: %w", err))
	}
	if typ, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return fail(fmt.Errorf("handoff: the descriptor is not a stream socket"))
	}
	f := os.NewFile(uintptr(fds[0]), "handoff")
	c, err := net.FileConn(f) // a duplicate; f's descriptor is ours to close
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	if _, err := uc.Write([]byte{'k'}); err != nil {
		c.Close()
		return nil, fmt.Errorf("handoff: ack: %w", err)
	}
	return &PrefixedConn{Conn: c, Pre: payload}, nil
}

// checkPeer admits only processes of our own user.
func (l *Listener) checkPeer(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("handoff: peer credentials: %w", cerr)
	}
	if int(cred.Uid) != l.uid {
		return fmt.Errorf("handoff: peer uid %d is not ours (%d)", cred.Uid, l.uid)
	}
	return nil
}

// rights returns the descriptors carried in oob.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handoff: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, fmt.Errorf("handoff: rights: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Send hands c (a socket) to the worker listening at path, with payload to
// be read before c's own bytes. On nil the worker holds the connection
// and the caller should close its own copy (which leaves the socket open);
// on an error nothing was written to c, which the caller still owns.
func Send(ctx context.Context, path string, c syscall.Conn, payload []byte) error {
	_, err := SendToPID(ctx, path, c, payload)
	return err
}

// SendToPID is Send that also tells which process took the socket (from
// the handoff connection's peer credentials), so that the caller can
// notice that process's end.
func SendToPID(ctx context.Context, path string, c syscall.Conn, payload []byte) (pid int, err error) {
	if len(payload) > MaxPayload {
		return 0, fmt.Errorf("handoff: payload of %d bytes, at most %d", len(payload), MaxPayload)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, ErrNotSocket
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "unix", path)
	if err != nil {
		return 0, fmt.Errorf("handoff: dial %s: %w", path, err)
	}
	uc := conn.(*net.UnixConn)
	defer uc.Close()
	deadline, _ := dctx.Deadline()
	_ = uc.SetDeadline(deadline)
	// The length and the socket in one message (a sendmsg of 4 bytes is
	// never cut short), then the payload as a stream.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(payload)))
	var werr error
	if err := rc.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix(hdr[:], unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return 0, ErrNotSocket
	}
	if werr != nil {
		return 0, fmt.Errorf("handoff: send: %w", werr)
	}
	// Nothing to write for no payload: the worker may have acknowledged and
	// closed already, and even an empty write would then fail (EPIPE).
	if len(payload) > 0 {
		if _, err := uc.Write(payload); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrSent, err)
		}
	}
	var ack [1]byte
	if _, err := io.ReadFull(uc, ack[:]); err != nil || ack[0] != 'k' {
		return 0, fmt.Errorf("%w: %w: %v", ErrRefused, ErrSent, err)
	}
	if urc, err := uc.SyscallConn(); err == nil {
		_ = urc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				pid = int(cred.Pid)
			}
		})
	}
	return pid, nil
}

// HostID names this host and mount namespace: two processes with the same
// HostID can reach each other's unix socket paths and pass sockets. Read
// once per process (neither changes while it runs).
var HostID = sync.OnceValue(hostID)

func hostID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	var st unix.Stat_t
	_ = unix.Stat("/proc/self/ns/mnt", &st)
	if len(boot) == 0 || st.Ino == 0 {
		return ""
	}
	return fmt.Sprintf("%s/%d", bytes.TrimSpace(boot), st.Ino)
}

// PrivateDir makes dir if needed and checks it is ours alone: another user
// must not be able to put a socket where our proxies look for a worker's.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("handoff: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("handoff: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return fmt.Errorf("handoff: %s is not a private directory of this user", dir)
	}
	return nil
}

// CleanStale removes the sockets in dir nobody listens on any more (a
// worker killed before it could remove its own). A socket that accepts, or
// that cannot be judged, is left alone.
func CleanStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(p)
		}
	}
}
