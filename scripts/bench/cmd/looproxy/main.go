//go:build linux

// Command looproxy is a benchmark baseline, not a product part: the least a
// Go relay can cost when it runs like nginx, one epoll event loop per CPU
// on a locked OS thread, no goroutine per connection. proxy-http.sh and
// ws-relay.sh run it next to the CloudBrowser proxy and nginx (LOOP=1) to
// show where the proxy's cost per request comes from.
//
//	looproxy -to 127.0.0.1:9001 -mode http        # finds each head's end, forwards bytes
//	looproxy -to 127.0.0.1:9001 -mode http-parse  # + net/http's parsers, rewritten heads, an HMAC
//	looproxy -to 127.0.0.1:9001 -mode tcp         # relays bytes both ways (WebSocket after 101)
//
// The http modes handle what the benchmarks send (GET, Content-Length
// answers, keep-alive) and nothing else; errors end the process.
package main

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/addrfile"
)

func main() {
	to := flag.String("to", "", "upstream host:port (IPv4)")
	mode := flag.String("mode", "http", "http, http-parse or tcp")
	loops := flag.Int("loops", runtime.NumCPU(), "event loops (one listener each, SO_REUSEPORT)")
	addrFile := flag.String("addr-file", "", "write the bound address here once listening")
	flag.Parse()
	ta, err := net.ResolveTCPAddr("tcp4", *to)
	if err != nil {
		log.Fatalf("-to: %v", err)
	}
	if *mode != "http" && *mode != "http-parse" && *mode != "tcp" {
		log.Fatalf("-mode: %q is not http, http-parse or tcp", *mode)
	}
	up := &unix.SockaddrInet4{Port: ta.Port}
	copy(up.Addr[:], ta.IP.To4())
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		log.Fatal(err)
	}
	port := 0
	for i := 0; i < *loops; i++ {
		lfd := listen(port)
		sa, err := unix.Getsockname(lfd)
		if err != nil {
			log.Fatal(err)
		}
		port = sa.(*unix.SockaddrInet4).Port
		l := &loop{lfd: lfd, up: up, mode: *mode, key: key, conns: map[int]*conn{}}
		go l.run()
	}
	if err := addrfile.Write(*addrFile, "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		log.Fatal(err)
	}
	select {}
}

func listen(port int) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		log.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
		log.Fatal(err)
	}
	if err := unix.Listen(fd, 1024); err != nil {
		log.Fatal(err)
	}
	return fd
}

type conn struct {
	fd       int
	upstream bool
	peer     *conn
	buf      []byte
	need     int           // upstream, http: the answer's length once its head is in
	req      *http.Request // upstream, http-parse: the request being answered
}

type loop struct {
	ep, lfd int
	up      *unix.SockaddrInet4
	mode    string
	key     []byte
	conns   map[int]*conn
	idle    []*conn // upstream connections between requests
}

func (l *loop) watch(fd int) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		log.Fatal(err)
	}
}

func (l *loop) run() {
	runtime.LockOSThread()
	var err error
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		log.Fatal(err)
	}
	l.watch(l.lfd)
	evs := make([]unix.EpollEvent, 128)
	rb := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(l.ep, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range evs[:n] {
			if fd := int(ev.Fd); fd == l.lfd {
				l.accept()
			} else if c := l.conns[fd]; c != nil {
				l.readable(c, rb)
			}
		}
	}
}

func (l *loop) accept() {
	for {
		fd, _, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: another loop took it, or none left
		}
		c := l.add(fd, false)
		if l.mode == "tcp" {
			u := l.dial()
			c.peer, u.peer = u, c
		}
	}
}

func (l *loop) add(fd int, upstream bool) *conn {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		log.Fatal(err)
	}
	c := &conn{fd: fd, upstream: upstream}
	l.conns[fd] = c
	l.watch(fd)
	return c
}

// dial connects to the upstream; on loopback a blocking connect returns at
// once, which is good enough for a baseline.
func (l *loop) dial() *conn {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := unix.Connect(fd, l.up); err != nil {
		log.Fatal(err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		log.Fatal(err)
	}
	return l.add(fd, true)
}

func (l *loop) close(c *conn) {
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	unix.Close(c.fd)
	delete(l.conns, c.fd)
	if p := c.peer; p != nil && l.mode == "tcp" && l.conns[p.fd] == p {
		c.peer = nil
		l.close(p)
	}
}

// readable handles one readiness event (level-triggered: bytes left unread
// are reported again).
func (l *loop) readable(c *conn, rb []byte) {
	n, err := unix.Read(c.fd, rb)
	if err == unix.EAGAIN {
		return
	}
	if err != nil || n == 0 {
		l.close(c)
		return
	}
	if l.mode == "tcp" {
		writeAll(c.peer.fd, rb[:n])
		return
	}
	c.buf = append(c.buf, rb[:n]...)
	if c.upstream {
		l.answer(c)
	} else {
		l.request(c)
	}
}

var crlf2 = []byte("\r\n\r\n")

func (l *loop) request(c *conn) {
	end := bytes.Index(c.buf, crlf2)
	if end < 0 {
		return
	}
	var u *conn
	if k := len(l.idle); k > 0 {
		u, l.idle = l.idle[k-1], l.idle[:k-1]
	} else {
		u = l.dial()
	}
	u.peer, u.need = c, 0
	head := c.buf[:end+4]
	if l.mode == "http-parse" {
		head = l.rewriteRequest(u, head)
	}
	writeAll(u.fd, head)
	c.buf = c.buf[:0]
}

// rewriteRequest does what a real proxy's request side does at the least:
// parse the head, write a new one with forwarding headers and a signature.
func (l *loop) rewriteRequest(u *conn, head []byte) []byte {
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		log.Fatal(err)
	}
	u.req = r
	var b bytes.Buffer
	b.WriteString(r.Method + " " + r.RequestURI + " HTTP/1.1\r\nHost: " + r.Host + "\r\n")
	for k, vv := range r.Header {
		for _, v := range vv {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	mac := hmac.New(sha256.New, l.key)
	mac.Write([]byte(r.Method + "\n" + r.Host + "\n" + r.RequestURI))
	b.WriteString("X-Forwarded-For: 127.0.0.1\r\nX-Request-Id: looproxy-1\r\nX-Bench-Sig: " + hex.EncodeToString(mac.Sum(nil)) + "\r\n\r\n")
	return b.Bytes()
}

func (l *loop) answer(u *conn) {
	end := bytes.Index(u.buf, crlf2)
	if end < 0 {
		return
	}
	if u.need == 0 {
		u.need = end + 4 + contentLength(u.buf[:end])
	}
	if len(u.buf) < u.need {
		return
	}
	out := u.buf[:u.need]
	if l.mode == "http-parse" {
		out = rewriteAnswer(u.req, out, end)
	}
	writeAll(u.peer.fd, out)
	u.buf, u.peer, u.req = u.buf[:0], nil, nil
	l.idle = append(l.idle, u)
}

// rewriteAnswer parses the answer's head with net/http and writes it anew.
func rewriteAnswer(r *http.Request, msg []byte, end int) []byte {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(msg[:end+4])), r)
	if err != nil {
		log.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + resp.Status + "\r\n")
	for k, vv := range resp.Header {
		for _, v := range vv {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("X-Request-Id: looproxy-1\r\n\r\n")
	b.Write(msg[end+4:])
	return b.Bytes()
}

func contentLength(head []byte) int {
	i := bytes.Index(bytes.ToLower(head), []byte("\r\ncontent-length:"))
	if i < 0 {
		return 0
	}
	v := head[i+len("\r\ncontent-length:"):]
	if j := bytes.IndexByte(v, '\r'); j >= 0 {
		v = v[:j]
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil {
		log.Fatalf("answer's Content-Length: %v", err)
	}
	return n
}

// writeAll writes b, waiting for room when the socket is full.
func writeAll(fd int, b []byte) {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EAGAIN {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd, 1000)
			continue
		}
		if err != nil {
			return // the peer left; its read side reports it
		}
		b = b[n:]
	}
}
