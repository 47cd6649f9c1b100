package chromium

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
)

// pageBindings are the page-to-worker bindings (Options.Bindings, Install):
// the page's calls queue up under cbrowser.mu, which guards these fields,
// and run in order on callLoop's goroutine, never on the event reader's.
type pageBindings struct {
	b        *cbrowser
	bindings map[string]func(string)
	// installed is the identifier of the script Install added last;
	// callLoopOn says the binding loop runs.
	installed  page.ScriptIdentifier
	callLoopOn bool
	calls      []bindingCall
	dropped    int
	callWake   chan struct{} // cap 1
}

type bindingCall struct{ name, payload string }

// maxQueuedCalls bounds the binding calls waiting for their fn, so a page
// that floods a binding cannot grow the worker's memory.
const maxQueuedCalls = 4096

// queue records a call of a binding the page made; b.mu held.
func (p *pageBindings) queue(name, payload string) {
	if _, ok := p.bindings[name]; !ok {
		return
	}
	if len(p.calls) < maxQueuedCalls {
		p.calls = append(p.calls, bindingCall{name, payload})
	} else {
		p.dropped++
	}
	select {
	case p.callWake <- struct{}{}:
	default:
	}
}

// callLoop runs the page's binding calls in order until the browser is
// done.
func (p *pageBindings) callLoop() {
	b := p.b
	defer b.rt.wg.Done()
	for {
		select {
		case <-b.done:
			return
		case <-b.callWake:
		}
		b.mu.Lock()
		calls, dropped := b.calls, b.dropped
		b.calls, b.dropped = nil, 0
		b.mu.Unlock()
		if dropped > 0 {
			b.log.Warn().Int("dropped", dropped).Msg("page floods a binding; calls dropped")
		}
		for _, c := range calls {
			if b.isDone() {
				return
			}
			b.mu.Lock()
			fn := b.bindings[c.name] // Install may replace it
			b.mu.Unlock()
			if fn != nil {
				fn(c.payload)
			}
		}
	}
}

// Install implements browser.Browser.
func (p *pageBindings) Install(ctx context.Context, script string, bindings map[string]func(string)) error {
	b := p.b
	if err := b.Err(); err != nil {
		return err
	}
	for name, fn := range bindings {
		if !pagescript.BindingName(name) || fn == nil {
			return fmt.Errorf("chromium: install: bad binding %q", name)
		}
	}
	b.mu.Lock()
	var added []string
	for name, fn := range bindings {
		if _, ok := b.bindings[name]; !ok {
			added = append(added, name)
		}
		if b.bindings == nil {
			b.bindings = map[string]func(string){}
		}
		b.bindings[name] = fn
	}
	startLoop := !b.callLoopOn && len(b.bindings) > 0
	if startLoop {
		b.callLoopOn = true
	}
	old := b.installed
	b.mu.Unlock()
	if startLoop {
		b.rt.mu.Lock()
		closed := b.rt.closed
		if !closed {
			b.rt.wg.Add(1)
		}
		b.rt.mu.Unlock()
		if !closed {
			go b.callLoop()
		}
	}
	for _, name := range added {
		if _, err := pageCall(ctx, b, runtime.AddBinding, runtime.AddBindingParams{Name: name}); err != nil {
			return fmt.Errorf("chromium: install binding %s: %w", name, err)
		}
	}
	if old != "" {
		if _, err := pageCall(ctx, b, page.RemoveScriptToEvaluateOnNewDocument, page.RemoveScriptToEvaluateOnNewDocumentParams{Identifier: old}); err != nil {
			return fmt.Errorf("chromium: install: remove the previous script: %w", err)
		}
	}
	if script == "" {
		return nil
	}
	res, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: script, RunImmediately: new(true),
	})
	if err != nil {
		return fmt.Errorf("chromium: install script: %w", err)
	}
	b.mu.Lock()
	b.installed = res.Identifier
	b.mu.Unlock()
	return nil
}
