//go:build linux

package edge

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loops' reads and writes are on non-blocking sockets: they never
// block, so they are made as raw system calls, without telling the Go
// scheduler. A scheduled call lets the runtime hand the loop's P to another
// thread whenever a loopback write takes a while, and taking it back costs
// futex wake-ups on every request (measured: docs/benchmarks.md, "HTTP").

func rawRead(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// pollNow returns the ready events without waiting.
func pollNow(ep int, evs []unix.EpollEvent) int {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0
	}
	return int(n)
}
