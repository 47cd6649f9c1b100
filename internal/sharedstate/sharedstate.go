// Package sharedstate holds the rules of an app instance's shared state
// (window.cloudbrowser.instance set/append): its limits and how an append
// changes a value. The hosting worker checks them before it asks the master
// to store a write, and the master, which decides, checks them again.
package sharedstate

import (
	"encoding/json"
	"fmt"
	"math"
)

// Limits on what a page may store.
const (
	MaxKeys  = 1024
	MaxValue = 256 << 10
	MaxKey   = 256
)

// An append keeps the last max entries: DefaultAppendMax when the page gives
// none, at most MaxAppendMax. The array is also trimmed from the front to
// stay within MaxValue, so max bounds the count and the byte limit always
// holds.
const (
	DefaultAppendMax = 100
	MaxAppendMax     = 10000
)

// CheckKey refuses an empty or too long key.
func CheckKey(key string) error {
	if len(key) == 0 || len(key) > MaxKey {
		return fmt.Errorf("state key must be 1-%d characters", MaxKey)
	}
	return nil
}

// CheckValue refuses a value over MaxValue.
func CheckValue(v []byte) error {
	if len(v) > MaxValue {
		return fmt.Errorf("state value is %d bytes, over the %d byte limit", len(v), MaxValue)
	}
	return nil
}

// AppendMax turns the page's max (nil: the default) into a count.
func AppendMax(m *float64) (int, error) {
	if m == nil {
		return DefaultAppendMax, nil
	}
	if *m != math.Trunc(*m) || *m < 1 || *m > MaxAppendMax {
		return 0, fmt.Errorf("append max must be an integer from 1 to %d", MaxAppendMax)
	}
	return int(*m), nil
}

// CheckEntry refuses an appended entry that could not fit alone. An empty
// entry stands for null.
func CheckEntry(entry []byte) error {
	if len(entry)+2 > MaxValue { // +2: the brackets of a one-entry array
		return fmt.Errorf("appended value is %d bytes: one entry must fit the %d byte value limit", len(entry), MaxValue-2)
	}
	return nil
}

// Append returns cur (a JSON array; nil or null is empty) with entry
// appended, keeping the last max entries and trimming the oldest to stay
// within MaxValue, and the new array's length.
func Append(key string, cur, entry []byte, max int) ([]byte, int, error) {
	if len(entry) == 0 {
		entry = []byte("null")
	}
	if err := CheckEntry(entry); err != nil {
		return nil, 0, err
	}
	if max < 1 || max > MaxAppendMax {
		return nil, 0, fmt.Errorf("append max must be an integer from 1 to %d", MaxAppendMax)
	}
	var list []json.RawMessage // a missing key or null is an empty array
	if len(cur) > 0 && json.Unmarshal(cur, &list) != nil {
		return nil, 0, fmt.Errorf("state key %q holds a value that is not an array", key)
	}
	list = append(list, entry)
	if len(list) > max {
		list = list[len(list)-max:]
	}
	size := 1 // "[" and "]" and a comma between entries
	for _, e := range list {
		size += len(e) + 1
	}
	for size > MaxValue { // the last entry alone fits (checked above)
		size -= len(list[0]) + 1
		list = list[1:]
	}
	v := make([]byte, 0, size)
	v = append(v, '[')
	for i, e := range list {
		if i > 0 {
			v = append(v, ',')
		}
		v = append(v, e...)
	}
	v = append(v, ']')
	return v, len(list), nil
}
