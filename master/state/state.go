// Package state is the master's durable state: one embedded bbolt database
// (<data-dir>/state.db) with a bucket per kind of record, values JSON.
//
// Every write is one bbolt transaction, which bbolt commits with fsync, so a
// crash leaves either the old or the new value, never half of one. bbolt
// holds an exclusive lock on the file, so a second master on the same data
// directory fails at start instead of corrupting it. A master without a
// data directory keeps the same records in memory.
//
// New durable state goes here, not into files of its own.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the database's name inside the data directory.
const FileName = "state.db"

// ErrLocked is returned by Open when another process holds the database.
var ErrLocked = errors.New("state: database is in use by another process")

// Store is the master's durable key-value state.
type Store struct {
	db *bolt.DB // nil = in memory

	mu  sync.RWMutex
	mem map[string]map[string][]byte
}

// Open opens (creating it if needed, mode 0600) the database at path, or an
// in-memory store when path is "".
func Open(path string) (*Store, error) {
	if path == "" {
		return &Store{mem: map[string]map[string][]byte{}}, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (is another master running on this data directory?)", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w (if the file is damaged, move it away and restart; the master then starts empty)", path, err)
	}
	return &Store{db: db}, nil
}

// Close releases the database.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

// Put stores v (as JSON) under bucket/key.
func (s *Store) Put(bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state: %s/%s: %w", bucket, key, err)
	}
	return s.Update(func(tx Tx) error { return tx.PutRaw(bucket, key, raw) })
}

// Get decodes bucket/key into v and reports whether it existed.
func (s *Store) Get(bucket, key string, v any) (bool, error) {
	var raw []byte
	s.view(func(get func(b, k string) []byte, _ func(b string) map[string][]byte) {
		if r := get(bucket, key); r != nil {
			raw = slices.Clone(r)
		}
	})
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("state: %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

// GetRaw returns a copy of the raw bytes stored under bucket/key (for
// values that are not JSON, such as job results) and whether they existed.
func (s *Store) GetRaw(bucket, key string) ([]byte, bool) {
	var raw []byte
	found := false
	s.view(func(get func(b, k string) []byte, _ func(b string) map[string][]byte) {
		if r := get(bucket, key); r != nil {
			raw, found = slices.Clone(r), true
		}
	})
	return raw, found
}

// PutRaw stores raw bytes under bucket/key as one transaction.
func (s *Store) PutRaw(bucket, key string, raw []byte) error {
	return s.Update(func(tx Tx) error { return tx.PutRaw(bucket, key, raw) })
}

// Has reports whether bucket/key exists (a flag kept by its presence).
func (s *Store) Has(bucket, key string) bool {
	found := false
	s.view(func(get func(b, k string) []byte, _ func(b string) map[string][]byte) {
		found = get(bucket, key) != nil
	})
	return found
}

// Delete removes bucket/key (nothing if absent).
func (s *Store) Delete(bucket, key string) error {
	return s.Update(func(tx Tx) error { return tx.Delete(bucket, key) })
}

// All returns a copy of every raw value in bucket, by key.
func (s *Store) All(bucket string) map[string][]byte {
	out := map[string][]byte{}
	s.view(func(_ func(b, k string) []byte, all func(b string) map[string][]byte) {
		for k, v := range all(bucket) {
			out[k] = slices.Clone(v)
		}
	})
	return out
}

// Each decodes every value of bucket into a new T and calls fn with it.
// A value that does not decode is reported with its key.
func Each[T any](s *Store, bucket string, fn func(key string, v T)) error {
	var errs []error
	for k, raw := range s.All(bucket) {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			errs = append(errs, fmt.Errorf("state: %s/%s: %w", bucket, k, err))
			continue
		}
		fn(k, v)
	}
	return errors.Join(errs...)
}

// Scan calls fn with every key of bucket after the key after (all keys
// when after is ""), in key order, until fn returns false. raw is valid
// only during the call.
func (s *Store) Scan(bucket, after string, fn func(key string, raw []byte) bool) {
	if s.db == nil {
		s.mu.RLock()
		defer s.mu.RUnlock()
		keys := make([]string, 0, len(s.mem[bucket]))
		for k := range s.mem[bucket] {
			if k > after {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !fn(k, s.mem[bucket][k]) {
				return
			}
		}
		return
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			if !fn(string(k), v) {
				break
			}
		}
		return nil
	})
}

// DropBucket removes bucket and everything in it (nothing if absent).
func (s *Store) DropBucket(bucket string) error {
	if s.db == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.mem, bucket)
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte(bucket)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("state: drop %s: %w", bucket, err)
	}
	return nil
}

// Tx is one atomic write: all its changes land together or not at all.
type Tx interface {
	ReadTx
	PutRaw(bucket, key string, raw []byte) error
	Put(bucket, key string, v any) error
	Delete(bucket, key string) error
}

// Update runs fn as one transaction; fn's error rolls it back.
func (s *Store) Update(fn func(Tx) error) error {
	if s.db == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		t := &memTx{staged: map[string]map[string][]byte{}, mem: s.mem}
		if err := fn(t); err != nil {
			return err
		}
		for b, kv := range t.staged {
			if s.mem[b] == nil {
				s.mem[b] = map[string][]byte{}
			}
			for k, v := range kv {
				if v == nil {
					delete(s.mem[b], k)
				} else {
					s.mem[b][k] = v
				}
			}
		}
		return nil
	}
	if err := s.db.Update(func(btx *bolt.Tx) error { return fn(boltTx{btx}) }); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// ReadTx reads one consistent snapshot of the store.
type ReadTx interface {
	// GetRaw returns bucket/key's raw value (nil if absent), as seen by this
	// transaction (in an Update, including its own earlier writes). The
	// slice is valid only during the transaction and must not be modified.
	GetRaw(bucket, key string) []byte
}

// View runs fn in one read transaction: every GetRaw sees the same
// snapshot, so records written together are read together (never half of
// an Update). fn's error is returned as is.
func (s *Store) View(fn func(ReadTx) error) error {
	var err error
	s.view(func(get func(b, k string) []byte, _ func(b string) map[string][]byte) {
		err = fn(readTx(get))
	})
	return err
}

type readTx func(b, k string) []byte

func (r readTx) GetRaw(bucket, key string) []byte { return r(bucket, key) }

func (s *Store) view(fn func(get func(b, k string) []byte, all func(b string) map[string][]byte)) {
	if s.db == nil {
		s.mu.RLock()
		defer s.mu.RUnlock()
		fn(func(b, k string) []byte { return s.mem[b][k] },
			func(b string) map[string][]byte { return maps.Clone(s.mem[b]) })
		return
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		fn(func(b, k string) []byte {
			if bk := tx.Bucket([]byte(b)); bk != nil {
				return bk.Get([]byte(k))
			}
			return nil
		}, func(b string) map[string][]byte {
			out := map[string][]byte{}
			if bk := tx.Bucket([]byte(b)); bk != nil {
				_ = bk.ForEach(func(k, v []byte) error { out[string(k)] = v; return nil })
			}
			return out
		})
		return nil
	})
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) GetRaw(bucket, key string) []byte {
	if b := t.tx.Bucket([]byte(bucket)); b != nil {
		return b.Get([]byte(key))
	}
	return nil
}

func (t boltTx) PutRaw(bucket, key string, raw []byte) error {
	b, err := t.tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

func (t boltTx) Put(bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", bucket, key, err)
	}
	return t.PutRaw(bucket, key, raw)
}

func (t boltTx) Delete(bucket, key string) error {
	if b := t.tx.Bucket([]byte(bucket)); b != nil {
		return b.Delete([]byte(key))
	}
	return nil
}

// memTx stages changes (nil = delete) until fn returns without error.
type memTx struct {
	staged map[string]map[string][]byte
	mem    map[string]map[string][]byte // committed values (Store.mu held)
}

func (t *memTx) GetRaw(bucket, key string) []byte {
	if v, ok := t.staged[bucket][key]; ok {
		return v // nil = deleted in this transaction
	}
	return t.mem[bucket][key]
}

func (t *memTx) PutRaw(bucket, key string, raw []byte) error {
	if t.staged[bucket] == nil {
		t.staged[bucket] = map[string][]byte{}
	}
	t.staged[bucket][key] = slices.Clone(raw)
	return nil
}

func (t *memTx) Put(bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", bucket, key, err)
	}
	return t.PutRaw(bucket, key, raw)
}

func (t *memTx) Delete(bucket, key string) error {
	if t.staged[bucket] == nil {
		t.staged[bucket] = map[string][]byte{}
	}
	t.staged[bucket][key] = nil
	return nil
}
