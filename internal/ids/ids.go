// Package ids makes the identifiers that appear in CloudBrowser URLs.
//
// An instance id carries the id of the worker that hosts it ("<worker>.<random>")
// so a proxy can still route an existing instance when the master is briefly
// unreachable. The master's table stays authoritative; the prefix is a hint.
package ids

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// enc is lowercase base32 without padding: URL-safe, case-stable, no ambiguity
// with the '.' separator.
var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Random returns n random URL-safe characters (5 bits each).
func Random(n int) string {
	b := make([]byte, (n*5+7)/8)
	if _, err := rand.Read(b); err != nil {
		panic("ids: crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	return enc.EncodeToString(b)[:n]
}

// NewWorkerID returns a fresh worker id such as "w-k3j9x2aa".
func NewWorkerID() string { return "w-" + Random(8) }

// NewInstance returns an instance id that names its hosting worker.
func NewInstance(workerID string) string { return workerID + "." + Random(12) }

// NewBrowser returns a browser id.
func NewBrowser() string { return "b" + Random(11) }

// ValidBrowser accepts NewBrowser's form (and a little more): browser ids
// go into URLs and storage keys.
func ValidBrowser(bid string) bool {
	if bid == "" || len(bid) > 40 {
		return false
	}
	for _, c := range bid {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// WorkerOf extracts the worker id encoded in an instance id.
func WorkerOf(instanceID string) (string, bool) {
	w, rest, ok := strings.Cut(instanceID, ".")
	if !ok || !ValidWorker(w) || rest == "" {
		return "", false
	}
	return w, true
}

// WorkerRule states what a worker id is, for flag help and error messages;
// ValidWorker checks it. Generated ids ("w-" + 8 characters) follow it.
// The 63 keeps instance ids (worker id + "." + 12) within ValidToken's 100.
const WorkerRule = "1-63 lowercase letters, digits or '-', not starting with '-'"

// ValidWorker reports whether s is a worker id (WorkerRule): it is the one
// check of the rule, used by the worker for its --id and by the master at
// registration.
func ValidWorker(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidToken reports whether s is a plausible instance or browser id: 1-100
// characters of [a-z0-9.-]. It guards lookups against arbitrary input.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > 100 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
