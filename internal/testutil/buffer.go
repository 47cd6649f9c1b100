package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a bytes.Buffer that several goroutines may write while the
// test reads it (logs, captured traffic). The zero value is ready.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of what was written so far.
func (b *SyncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Contains reports whether sub was written.
func (b *SyncBuffer) Contains(sub string) bool {
	return strings.Contains(b.String(), sub)
}
