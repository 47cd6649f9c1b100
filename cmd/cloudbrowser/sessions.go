package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"
)

// The sessions commands (docs/automation.md, "Sessions") call the master's
// sessions API with the automation token (<data-dir>/automation.token) by
// default; the admin token and author tokens work too (--token).
const automationToken = "automation.token"

// Bounds the master checks too (master/sessions), checked here first so
// that a mistake is named by its flag.
const (
	maxSessionTime                         = 24 * time.Hour
	sessionViewportMin, sessionViewportMax = 100, 4096
)

// sessionView is a session as the API answers it.
type sessionView struct {
	ID          string `json:"id"`
	App         string `json:"app"`
	InstanceID  string `json:"instanceId"`
	BrowserID   string `json:"browserId"`
	CDPURL      string `json:"cdpUrl"`
	LiveURL     string `json:"liveUrl"`
	CreatedAt   string `json:"createdAt"`
	ExpiresAt   string `json:"expiresAt"`
	Owner       string `json:"owner"`
	Timeout     string `json:"timeout"`
	IdleTimeout string `json:"idleTimeout"`
	KeepAlive   string `json:"keepAlive"`
	Viewport    *struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	} `json:"viewport"`
}

func sessionsCmd() *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "open, list, show and delete automation sessions: an app's browser driven over CDP",
		Description: `An automation session is an app instance with one browser that Playwright
(chromium.connectOverCDP), Puppeteer (connect) or chromedp drive at its cdpUrl
(docs/automation.md). The commands use <data-dir>/automation.token unless --token is given;
author and admin tokens work too (authors: on the apps they may use).`,
		Commands: []*cli.Command{sessionsCreateCmd(), sessionsListCmd(), sessionsShowCmd(), sessionsDeleteCmd()},
	}
}

func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print the raw JSON"} }

func sessionsCreateCmd() *cli.Command {
	return &cli.Command{
		Name:  "create",
		Usage: "open a session on an app and print its CDP URL",
		Flags: append(apiFlags(automationToken),
			&cli.StringFlag{Name: "app", Usage: "the application (mount point) whose browser to open; required"},
			&cli.DurationFlag{Name: "timeout", Usage: "the session ends after this long, e.g. 10m (at most 24h; 0: the master's default, 15m)"},
			&cli.DurationFlag{Name: "idle-timeout", Usage: "end it after this long without CDP traffic or a viewer (0: the master's default, 5m)"},
			&cli.DurationFlag{Name: "keep-alive", Usage: "keep the browser this long after the client disconnects, for it to reconnect"},
			&cli.IntFlag{Name: "width", Usage: "viewport width in CSS pixels, 100..4096 (with --height)"},
			&cli.IntFlag{Name: "height", Usage: "viewport height in CSS pixels, 100..4096 (with --width)"},
			&cli.BoolFlag{Name: "cdp-url", Usage: "print only the CDP URL (for scripts)"},
			jsonFlag(),
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return fmt.Errorf("sessions create takes no arguments (the app is --app)")
			}
			body, err := sessionBody(cmd)
			if err != nil {
				return err
			}
			c, err := newAPIClient(cmd, automationToken)
			if err != nil {
				return err
			}
			raw, _, err := c.send(ctx, http.MethodPost, "/api/v1/sessions", bytes.NewReader(body), "application/json")
			if err != nil {
				return err
			}
			return printSession(cmd, raw)
		},
	}
}

// sessionBody builds POST /api/v1/sessions's body from the flags; a bad
// value is named by its flag.
func sessionBody(cmd *cli.Command) ([]byte, error) {
	app := strings.TrimPrefix(strings.TrimSpace(cmd.String("app")), "/")
	if app == "" {
		return nil, fmt.Errorf("--app: required: the application whose browser to open")
	}
	body := map[string]any{"app": app}
	for _, f := range []struct{ flag, field string }{{"timeout", "timeout"}, {"idle-timeout", "idleTimeout"}, {"keep-alive", "keepAlive"}} {
		d := cmd.Duration(f.flag)
		switch {
		case d < 0:
			return nil, fmt.Errorf("--%s: must not be negative", f.flag)
		case d > maxSessionTime:
			return nil, fmt.Errorf("--%s: must be at most %s", f.flag, maxSessionTime)
		case d > 0 && d < time.Second && f.flag != "keep-alive":
			return nil, fmt.Errorf("--%s: must be at least 1s", f.flag)
		case d > 0:
			body[f.field] = d.String()
		}
	}
	w, h := int(cmd.Int("width")), int(cmd.Int("height"))
	switch {
	case w == 0 && h == 0:
	case w == 0:
		return nil, fmt.Errorf("--width: must be given with --height")
	case h == 0:
		return nil, fmt.Errorf("--height: must be given with --width")
	case w < sessionViewportMin || w > sessionViewportMax:
		return nil, fmt.Errorf("--width: must be between %d and %d, got %d", sessionViewportMin, sessionViewportMax, w)
	case h < sessionViewportMin || h > sessionViewportMax:
		return nil, fmt.Errorf("--height: must be between %d and %d, got %d", sessionViewportMin, sessionViewportMax, h)
	default:
		body["viewport"] = map[string]int{"width": w, "height": h}
	}
	return json.Marshal(body)
}

// printSession prints one session answer as --json or --cdp-url ask.
func printSession(cmd *cli.Command, raw []byte) error {
	out := stdout(cmd)
	if cmd.Bool("json") {
		_, err := out.Write(append(raw, '\n'))
		return err
	}
	var s sessionView
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("unexpected answer from the master: %w", err)
	}
	if cmd.Bool("cdp-url") {
		_, err := fmt.Fprintln(out, s.CDPURL)
		return err
	}
	writeSession(out, &s)
	return nil
}

func writeSession(out io.Writer, s *sessionView) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	line("session", s.ID)
	line("app", "/"+s.App)
	line("owner", orDash(s.Owner))
	line("cdp url", s.CDPURL)
	line("live url", s.LiveURL)
	line("instance", s.InstanceID)
	line("browser", s.BrowserID)
	line("created", when(s.CreatedAt))
	line("expires", when(s.ExpiresAt))
	line("timeout", orDash(s.Timeout))
	line("idle timeout", orDash(s.IdleTimeout))
	line("keep alive", orDash(s.KeepAlive))
	if v := s.Viewport; v != nil {
		line("viewport", fmt.Sprintf("%dx%d", v.Width, v.Height))
	}
	tw.Flush()
}

func sessionsListCmd() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the open sessions (yours; the admin token: everyone's)",
		Flags: append(apiFlags(automationToken), &cli.StringFlag{Name: "app", Usage: "only the sessions of this app"}, jsonFlag()),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			path := "/api/v1/sessions"
			if app := strings.TrimPrefix(cmd.String("app"), "/"); app != "" {
				path += "?app=" + url.QueryEscape(app)
			}
			c, err := newAPIClient(cmd, automationToken)
			if err != nil {
				return err
			}
			raw, _, err := c.send(ctx, http.MethodGet, path, nil, "")
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				_, err := stdout(cmd).Write(append(raw, '\n'))
				return err
			}
			var list struct {
				Sessions []sessionView `json:"sessions"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return fmt.Errorf("unexpected answer from the master: %w", err)
			}
			tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAPP\tOWNER\tINSTANCE\tBROWSER\tCREATED\tEXPIRES")
			for _, s := range list.Sessions {
				fmt.Fprintf(tw, "%s\t/%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.App, orDash(s.Owner), s.InstanceID, s.BrowserID,
					when(s.CreatedAt), when(s.ExpiresAt))
			}
			return tw.Flush()
		},
	}
}

func sessionsShowCmd() *cli.Command {
	return &cli.Command{
		Name: "show", Usage: "show a session: its CDP and live URLs, times and viewport", ArgsUsage: "ID",
		Flags: append(apiFlags(automationToken),
			&cli.BoolFlag{Name: "cdp-url", Usage: "print only the CDP URL (for scripts)"}, jsonFlag()),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			_, raw, err := oneSession(ctx, cmd, http.MethodGet)
			if err != nil {
				return err
			}
			return printSession(cmd, raw)
		},
	}
}

func sessionsDeleteCmd() *cli.Command {
	return &cli.Command{
		Name: "delete", Usage: "end a session: its instance is closed on its worker", ArgsUsage: "ID",
		Flags: apiFlags(automationToken),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, _, err := oneSession(ctx, cmd, http.MethodDelete)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "session %s: deleted\n", id)
			return nil
		},
	}
}

// oneSession sends method to the session the command's one argument names
// and returns its id and the answer.
func oneSession(ctx context.Context, cmd *cli.Command, method string) (id string, raw []byte, err error) {
	if id, err = oneID(cmd, "session"); err != nil {
		return "", nil, err
	}
	c, err := newAPIClient(cmd, automationToken)
	if err != nil {
		return "", nil, err
	}
	raw, _, err = c.send(ctx, method, "/api/v1/sessions/"+url.PathEscape(id), nil, "")
	return id, raw, err
}
