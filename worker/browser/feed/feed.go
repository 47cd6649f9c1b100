// Package feed hands a runtime's events to their subscribers: in order, on
// a goroutine of its own that runs only while there is something to hand,
// so who posts (a CDP event reader, which must never wait) never blocks.
package feed

import (
	"maps"
	"slices"
	"sync"
)

// Feed delivers values of T to its subscribers. The zero Feed is ready:
// each value goes to every subscriber of the moment it is handed over.
type Feed[T any] struct {
	mu sync.Mutex
	// handle gets each value with the subscribers of the moment (nil:
	// call each).
	handle  func(v T, fns []func(T))
	subs    map[int]func(T)
	next    int
	queue   []T
	running bool
	ended   bool
}

// Init sets how a value reaches the subscribers, e.g. to stop once the
// browser is gone; before the first Post.
func (f *Feed[T]) Init(handle func(v T, fns []func(T))) {
	f.mu.Lock()
	f.handle = handle
	f.mu.Unlock()
}

// Subscribe adds fn; stop removes it.
func (f *Feed[T]) Subscribe(fn func(T)) (stop func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[int]func(T){}
	}
	id := f.next
	f.next++
	f.subs[id] = fn
	return func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
	}
}

// Post queues v, or puts it in place of the last value queued if replaces
// says v makes that one stale. It never blocks.
func (f *Feed[T]) Post(v T, replaces func(last T) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	if n := len(f.queue); n > 0 && replaces != nil && replaces(f.queue[n-1]) {
		f.queue[n-1] = v
		return
	}
	f.queue = append(f.queue, v)
	if !f.running {
		f.running = true
		go f.drain()
	}
}

func (f *Feed[T]) drain() {
	for {
		f.mu.Lock()
		if len(f.queue) == 0 || f.ended {
			f.queue, f.running = nil, false
			f.mu.Unlock()
			return
		}
		v := f.queue[0]
		f.queue = f.queue[1:]
		fns := slices.Collect(maps.Values(f.subs))
		handle := f.handle
		f.mu.Unlock()
		if handle == nil {
			for _, fn := range fns {
				fn(v)
			}
			continue
		}
		handle(v, fns)
	}
}

// End stops the deliveries for good: what is queued is dropped.
func (f *Feed[T]) End() {
	f.mu.Lock()
	f.ended, f.queue = true, nil
	f.mu.Unlock()
}
