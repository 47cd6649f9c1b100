package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
)

// Limits bound what an uploaded bundle may contain.
type Limits struct {
	MaxFiles     int   // default 10,000
	MaxFileBytes int64 // default MaxFileSize
	MaxTotal     int64 // uncompressed, default 64 MiB
}

func (l Limits) withDefaults() Limits {
	config.OrDefault(&l.MaxFiles, 10_000)
	config.OrDefault(&l.MaxFileBytes, MaxFileSize)
	config.OrDefault(&l.MaxTotal, 64<<20)
	return l
}

// Pack writes the bundle rooted at dir of fsys as a tar.gz archive with
// slash paths relative to dir.
func Pack(fsys fs.FS, dir string) ([]byte, error) {
	b, err := Load(fsys, dir) // validates first: never upload a bad bundle
	if err != nil {
		return nil, err
	}
	return b.Pack()
}

// Pack writes the bundle as a tar.gz archive.
func (b *Bundle) Pack() ([]byte, error) {
	var buf bytes.Buffer
	// Fastest level: the master packs every stored version and every large
	// app it serves to workers; the ratio barely differs for web assets.
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(b.Files))
	for n := range b.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data := b.Files[n]
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("pack %s: %w", n, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("pack %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrArchive marks an archive that cannot be accepted.
var ErrArchive = errors.New("bundle archive rejected")

// Unpack reads a tar.gz bundle and validates it. It rejects absolute
// paths, paths with "..", every entry that is not a regular file or a
// directory (symbolic and hard links, devices, fifos: a link is a way to
// multiply bytes past the limits, so the CLI copies link targets instead),
// and sizes over the limits. Every entry counts toward MaxFiles.
func Unpack(r io.Reader, lim Limits) (*Bundle, error) {
	lim = lim.withDefaults()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip: %w", ErrArchive, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var total int64
	entries := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: not a tar archive: %w", ErrArchive, err)
		}
		if entries++; entries > lim.MaxFiles {
			return nil, fmt.Errorf("%w: more than %d entries", ErrArchive, lim.MaxFiles)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("%w: %s is %s; a bundle may hold only regular files and directories", ErrArchive, name, entryKind(h))
		}
		if h.Size < 0 || h.Size > lim.MaxFileBytes {
			return nil, fmt.Errorf("%w: %s is %d bytes, over the %d byte limit", ErrArchive, name, h.Size, lim.MaxFileBytes)
		}
		total += h.Size
		if total > lim.MaxTotal {
			return nil, fmt.Errorf("%w: more than %d bytes uncompressed", ErrArchive, lim.MaxTotal)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("%w: %s appears twice", ErrArchive, name)
		}
		data, err := io.ReadAll(io.LimitReader(tr, h.Size+1))
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s: %w", ErrArchive, name, err)
		}
		if int64(len(data)) != h.Size {
			return nil, fmt.Errorf("%w: %s is truncated", ErrArchive, name)
		}
		files[name] = data
	}
	return FromFiles(files)
}

// entryKind names a tar entry's type for error messages.
func entryKind(h *tar.Header) string {
	switch h.Typeflag {
	case tar.TypeSymlink:
		return fmt.Sprintf("a symbolic link (to %q)", h.Linkname)
	case tar.TypeLink:
		return fmt.Sprintf("a hard link (to %q)", h.Linkname)
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeFifo:
		return "a named pipe (fifo)"
	default:
		return fmt.Sprintf("an entry of type %q", h.Typeflag)
	}
}

// cleanName accepts relative slash paths that stay inside the bundle.
func cleanName(n string) (string, error) {
	if n == "" || strings.HasPrefix(n, "/") || strings.Contains(n, "\\") || strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: path %q is absolute or malformed", ErrArchive, n)
	}
	for _, seg := range strings.Split(n, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: path %q leaves the bundle", ErrArchive, n)
		}
	}
	c := path.Clean(strings.TrimPrefix(n, "./"))
	if c == "." || c == "" {
		return "", fmt.Errorf("%w: path %q names no file", ErrArchive, n)
	}
	return c, nil
}

// FromFiles builds and validates a bundle from its files (the manifest
// among them).
func FromFiles(files map[string][]byte) (*Bundle, error) {
	raw, ok := files[ManifestName]
	if !ok {
		return nil, fmt.Errorf("%w: no %s at the root", ErrArchive, ManifestName)
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(files))
	for n := range files {
		names[n] = true
	}
	if err := m.Validate(names); err != nil {
		return nil, err
	}
	return &Bundle{Manifest: *m, Files: files}, nil
}
