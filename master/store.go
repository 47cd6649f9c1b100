package master

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// appStore keeps deployed bundles in the master's data directory so apps
// survive restarts:
//
//	<dir>/<mountPoint>/v<N>.tar.gz   every kept version (the current and the one before)
//	<dir>/<mountPoint>/state.json    {"version": N, "disabled": false}
//
// A new version is written in full before state.json switches to it (both
// by write-to-temp and rename), so a crash mid-deploy keeps the old one.
type appStore struct{ dir string }

type storeState struct {
	Version  int  `json:"version"`
	Disabled bool `json:"disabled"`
}

func (s *appStore) appDir(mount string) string { return filepath.Join(s.dir, mount) }

// writeAtomic replaces path durably: temp file, fsync, rename, directory
// fsync.
func writeAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, 0o600)
}

// save stores version v of a bundle and makes it current.
func (s *appStore) save(b *bundle.Bundle, v int, disabled bool) error {
	dir := s.appDir(b.Manifest.MountPoint)
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("app store: %w", err)
	}
	arch, err := b.Pack()
	if err != nil {
		return fmt.Errorf("app store: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, "v"+strconv.Itoa(v)+".tar.gz"), arch); err != nil {
		return fmt.Errorf("app store: %w", err)
	}
	if err := s.setState(b.Manifest.MountPoint, storeState{Version: v, Disabled: disabled}); err != nil {
		return err
	}
	// Keep the current version and the one before; drop older ones.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n, ok := versionOf(e.Name())
		if ok && n < v-1 {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func versionOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "v")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".tar.gz")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func (s *appStore) setState(mount string, st storeState) error {
	b, _ := json.Marshal(st)
	if err := writeAtomic(filepath.Join(s.appDir(mount), "state.json"), b); err != nil {
		return fmt.Errorf("app store: %w", err)
	}
	return nil
}

func (s *appStore) remove(mount string) error {
	if err := os.RemoveAll(s.appDir(mount)); err != nil {
		return fmt.Errorf("app store: %w", err)
	}
	// Make the removal durable, or a crash could bring the app back. No
	// store directory: nothing was ever stored, nothing to sync.
	if err := atomicfile.SyncDir(s.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("app store: %w", err)
	}
	return nil
}

// load returns the current version of every stored app.
func (s *appStore) load() ([]wire.App, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("app store: %w", err)
	}
	var out []wire.App
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.dir, e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err != nil {
			errs = append(errs, fmt.Errorf("app store %s: %w", e.Name(), err))
			continue
		}
		var st storeState
		if err := json.Unmarshal(raw, &st); err != nil {
			errs = append(errs, fmt.Errorf("app store %s: state.json: %w", e.Name(), err))
			continue
		}
		arch, err := os.ReadFile(filepath.Join(dir, "v"+strconv.Itoa(st.Version)+".tar.gz"))
		if err != nil {
			errs = append(errs, fmt.Errorf("app store %s: %w", e.Name(), err))
			continue
		}
		b, err := bundle.Unpack(bytes.NewReader(arch), bundle.Limits{})
		if err != nil {
			errs = append(errs, fmt.Errorf("app store %s v%d: %w", e.Name(), st.Version, err))
			continue
		}
		app := b.App()
		app.Version, app.Disabled = st.Version, st.Disabled
		out = append(out, app)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MountPoint < out[j].MountPoint })
	return out, errors.Join(errs...)
}
