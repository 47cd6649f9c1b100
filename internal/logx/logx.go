// Package logx configures zerolog for CloudBrowser processes and adapts other
// libraries' loggers (memberlist's *log.Logger) to it.
package logx

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// New returns the root logger. format is "json" (default) or "console".
func New(w io.Writer, format, level string) (zerolog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	lvl := zerolog.InfoLevel
	if level != "" {
		l, err := zerolog.ParseLevel(strings.ToLower(level))
		if err != nil {
			return zerolog.Nop(), fmt.Errorf("--log-level %q: %w", level, err)
		}
		lvl = l
	}
	switch format {
	case "", "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// StdLogger returns a *log.Logger whose lines become zerolog events. Lines that
// start with memberlist's "[LEVEL]" prefix keep their level.
func StdLogger(l zerolog.Logger) *log.Logger {
	return log.New(stdWriter{l}, "", 0)
}

type stdWriter struct{ l zerolog.Logger }

func (s stdWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	lvl := zerolog.InfoLevel
	for prefix, l := range map[string]zerolog.Level{
		"[DEBUG]": zerolog.DebugLevel, "[INFO]": zerolog.InfoLevel,
		"[WARN]": zerolog.WarnLevel, "[ERR]": zerolog.ErrorLevel, "[ERROR]": zerolog.ErrorLevel,
	} {
		if strings.HasPrefix(msg, prefix) {
			lvl = l
			msg = strings.TrimSpace(strings.TrimPrefix(msg, prefix))
			break
		}
	}
	s.l.WithLevel(lvl).Msg(msg)
	return len(p), nil
}
