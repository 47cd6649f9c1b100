package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// The jobs commands (docs/jobs.md) call the master's jobs API
// with the jobs token (<data-dir>/jobs.token) by default; the admin token
// and author tokens work too (--token).
const jobsToken = "jobs.token"

// minMonitorEvery is the shortest monitor interval the CLI accepts: a
// shorter one would mostly measure the site's rate limits.
const minMonitorEvery = 10 * time.Second

// maxViewport bounds --width and --height (the worker caps full-page
// captures at the same number of CSS pixels).
const maxViewport = 16384

func stdout(cmd *cli.Command) io.Writer {
	if w := cmd.Root().Writer; w != nil {
		return w
	}
	return os.Stdout
}

func stderr(cmd *cli.Command) io.Writer {
	if w := cmd.Root().ErrWriter; w != nil {
		return w
	}
	return os.Stderr
}

// specFlags are the options of a render or check, shared by render,
// jobs submit and monitor add.
func specFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "format", Usage: "render format: png, jpeg, pdf, html or text (default png)"},
		&cli.StringFlag{Name: "app", Usage: "lend the browser from this app's pool (logged in by its init sequence) and apply its navigation policy"},
		&cli.IntFlag{Name: "width", Usage: "viewport width in CSS pixels (with --height)"},
		&cli.IntFlag{Name: "height", Usage: "viewport height in CSS pixels (with --width)"},
		&cli.BoolFlag{Name: "full-page", Usage: "capture the whole page, not only the viewport (png, jpeg)"},
		&cli.IntFlag{Name: "quality", Usage: "JPEG quality 1..100 (--format jpeg)"},
		&cli.StringFlag{Name: "wait-selector", Usage: "after load, wait for this CSS selector to appear"},
		&cli.BoolFlag{Name: "wait-network-idle", Usage: "after load, wait until no request is in flight for 500 ms"},
		&cli.DurationFlag{Name: "wait-delay", Usage: "after load (and the other waits), wait this long"},
		&cli.DurationFlag{Name: "timeout", Usage: "bound of one attempt: navigation, waits and capture (0: the master's default)"},
		&cli.DurationFlag{Name: "max-age", Usage: "a cached render older than this is stale (0: the master's default)"},
		&cli.BoolFlag{Name: "no-cache", Usage: "render even when a fresh result is cached"},
		&cli.BoolFlag{Name: "ignore-robots", Usage: "fetch even when robots.txt disallows it (renders only)"},
		&cli.BoolFlag{Name: "subresources", Usage: "let a check's page load its images, scripts and styles, each held to its host's budget (checks only; without it a check fetches the document alone)"},
	}
}

// flagOf names the CLI flag of a JobSpec JSON field, for error messages.
var flagOf = map[string]string{
	"kind": "--kind", "url": "URL", "app": "--app", "format": "--format", "width": "--width",
	"height": "--height", "fullPage": "--full-page", "quality": "--quality",
	"waitSelector": "--wait-selector", "waitDelayMs": "--wait-delay", "timeoutMs": "--timeout",
	"maxAgeMs": "--max-age", "noCache": "--no-cache", "ignoreRobots": "--ignore-robots",
	"subresources": "--subresources",
}

// specFromFlags builds a job from the command's flags and checks it.
func specFromFlags(cmd *cli.Command, kind, rawURL string) (wire.JobSpec, error) {
	s := wire.JobSpec{
		Kind: kind, URL: rawURL, App: strings.TrimPrefix(cmd.String("app"), "/"),
		Format: cmd.String("format"), Width: int(cmd.Int("width")), Height: int(cmd.Int("height")),
		FullPage: cmd.Bool("full-page"), Quality: int(cmd.Int("quality")),
		WaitSelector: cmd.String("wait-selector"), WaitNetworkIdle: cmd.Bool("wait-network-idle"),
		WaitDelayMs: cmd.Duration("wait-delay").Milliseconds(), TimeoutMs: cmd.Duration("timeout").Milliseconds(),
		MaxAgeMs: cmd.Duration("max-age").Milliseconds(), NoCache: cmd.Bool("no-cache"),
		IgnoreRobots: cmd.Bool("ignore-robots"), Subresources: cmd.Bool("subresources"),
	}
	// Negative durations lose their sign nowhere, but a sub-millisecond
	// positive one would become "default": refuse both clearly.
	for _, f := range []string{"wait-delay", "timeout", "max-age"} {
		if d := cmd.Duration(f); d < 0 || (d > 0 && d < time.Millisecond) {
			return s, fmt.Errorf("--%s: must be at least 1ms (or not given)", f)
		}
	}
	if err := validateSpec(s); err != nil {
		return s, flagError(err)
	}
	return s, nil
}

// fieldError is a problem with one JobSpec field (JSON name).
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// flagError renames a fieldError's field to its flag.
func flagError(err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		if f, ok := flagOf[fe.field]; ok {
			return fmt.Errorf("%s: %s", f, fe.msg)
		}
	}
	return err
}

// validateSpec checks what the CLI can check before asking the master
// (which checks everything again).
func validateSpec(s wire.JobSpec) error {
	render := s.Kind == wire.JobRender
	if !render && s.Kind != wire.JobCheck {
		return &fieldError{"kind", fmt.Sprintf("must be %s or %s, not %q", wire.JobRender, wire.JobCheck, s.Kind)}
	}
	if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &fieldError{"url", fmt.Sprintf("%q must be an absolute http:// or https:// URL", s.URL)}
	}
	switch s.Format {
	case "", wire.FormatPNG, wire.FormatJPEG, wire.FormatPDF, wire.FormatHTML, wire.FormatText:
	default:
		return &fieldError{"format", fmt.Sprintf("must be png, jpeg, pdf, html or text, not %q", s.Format)}
	}
	if !render && s.Format != "" {
		return &fieldError{"format", "only for renders (a check has no output format)"}
	}
	for _, d := range []struct {
		field string
		v     int
	}{{"width", s.Width}, {"height", s.Height}} {
		if d.v < 0 || d.v > maxViewport {
			return &fieldError{d.field, fmt.Sprintf("must be between 1 and %d", maxViewport)}
		}
	}
	if (s.Width == 0) != (s.Height == 0) {
		if s.Width == 0 {
			return &fieldError{"width", "must be given with the height"}
		}
		return &fieldError{"height", "must be given with the width"}
	}
	if s.Quality < 0 || s.Quality > 100 {
		return &fieldError{"quality", "must be between 1 and 100"}
	}
	if s.Quality != 0 && s.Format != wire.FormatJPEG {
		return &fieldError{"quality", "only for the jpeg format"}
	}
	if s.FullPage && s.Format != "" && s.Format != wire.FormatPNG && s.Format != wire.FormatJPEG {
		return &fieldError{"fullPage", "only for the png and jpeg formats"}
	}
	for _, d := range []struct {
		field string
		v     int64
	}{{"waitDelayMs", s.WaitDelayMs}, {"timeoutMs", s.TimeoutMs}, {"maxAgeMs", s.MaxAgeMs}} {
		if d.v < 0 {
			return &fieldError{d.field, "must not be negative"}
		}
	}
	if s.IgnoreRobots && !render {
		return &fieldError{"ignoreRobots", "only for renders (checks always honour robots.txt)"}
	}
	if s.Subresources && render {
		return &fieldError{"subresources", "only for checks (a render loads the whole page)"}
	}
	return nil
}

// specQuery is a spec as the query of GET /api/v1/render.
func specQuery(s wire.JobSpec) url.Values {
	q := url.Values{"url": {s.URL}}
	set := func(k, v string, ok bool) {
		if ok {
			q.Set(k, v)
		}
	}
	set("format", s.Format, s.Format != "")
	set("app", s.App, s.App != "")
	set("width", strconv.Itoa(s.Width), s.Width != 0)
	set("height", strconv.Itoa(s.Height), s.Height != 0)
	set("fullPage", "true", s.FullPage)
	set("quality", strconv.Itoa(s.Quality), s.Quality != 0)
	set("waitSelector", s.WaitSelector, s.WaitSelector != "")
	set("waitNetworkIdle", "true", s.WaitNetworkIdle)
	set("waitDelayMs", strconv.FormatInt(s.WaitDelayMs, 10), s.WaitDelayMs != 0)
	set("timeoutMs", strconv.FormatInt(s.TimeoutMs, 10), s.TimeoutMs != 0)
	set("maxAgeMs", strconv.FormatInt(s.MaxAgeMs, 10), s.MaxAgeMs != 0)
	set("noCache", "true", s.NoCache)
	set("ignoreRobots", "true", s.IgnoreRobots)
	return q
}

// writeOutput writes data to path atomically, or to stdout for "-".
func writeOutput(cmd *cli.Command, path string, data []byte) error {
	if path == "-" {
		_, err := stdout(cmd).Write(data)
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	return nil
}

func outputFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: usage}
}

func renderCmd() *cli.Command {
	return &cli.Command{
		Name:      "render",
		Usage:     "render a URL in a cluster browser and save the result (screenshot, PDF, HTML or text)",
		ArgsUsage: "URL",
		Description: `render asks the master for a render and waits for it (GET /api/v1/render). A fresh
result from the render cache is answered at once ("cache hit"). The file is written
atomically; -o - writes the bytes to stdout. Uses <data-dir>/jobs.token unless --token.`,
		Flags: append(append(apiFlags(jobsToken), outputFlag("file to write (- for stdout); required")), specFlags()...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("render needs one argument: the URL")
			}
			out := cmd.String("output")
			if out == "" {
				return fmt.Errorf("-o/--output: required (a file, or - for stdout)")
			}
			s, err := specFromFlags(cmd, wire.JobRender, cmd.Args().First())
			if err != nil {
				return err
			}
			c, err := newAPIClient(cmd, jobsToken)
			if err != nil {
				return err
			}
			body, resp, err := c.send(ctx, http.MethodGet, "/api/v1/render?"+specQuery(s).Encode(), nil, "")
			if err != nil {
				return err
			}
			if err := writeOutput(cmd, out, body); err != nil {
				return err
			}
			summary := stdout(cmd)
			if out == "-" {
				summary = stderr(cmd)
			}
			cache := "cache " + strings.ToLower(resp.Header.Get("X-Cache"))
			if resp.Header.Get("X-Cache") == "" {
				cache = "cache unknown"
			}
			line := fmt.Sprintf("%s, %d bytes", cache, len(body))
			if ct := resp.Header.Get("Content-Type"); ct != "" {
				line += ", " + ct
			}
			if a := resp.Header.Get("Age"); a != "" {
				line += ", age " + a + "s"
			}
			if out != "-" {
				line += " → " + out
			}
			fmt.Fprintln(summary, line)
			return nil
		},
	}
}

// jobView is a job as the API shows it. Fields whose type the API may
// still change are kept raw and printed as they come.
type jobView struct {
	ID              string          `json:"id"`
	State           string          `json:"state"`
	Reason          string          `json:"reason"`
	Disallow        json.RawMessage `json:"disallow"`
	Class           string          `json:"class"`
	Budget          json.RawMessage `json:"budget"`
	Monitor         json.RawMessage `json:"monitor"`
	Created         string          `json:"created"`
	Started         string          `json:"started"`
	Finished        string          `json:"finished"`
	Worker          string          `json:"worker"`
	Deadline        string          `json:"deadline"`
	Tries           int             `json:"tries"`
	Attempts        []attemptView   `json:"attempts"`
	Spec            wire.JobSpec    `json:"spec"`
	Result          *outcomeView    `json:"result"`
	GeneratingSince string          `json:"generatingSince"`
}

type attemptView struct {
	N       int    `json:"n"`
	Worker  string `json:"worker"`
	Started string `json:"started"`
	Ended   string `json:"ended"`
	Err     string `json:"err"`
}

// outcomeView is wire.JobOutcome as JSON: the API may use its Go field
// names or lower-case ones (encoding/json matches either).
type outcomeView struct {
	Status      int             `json:"status"`
	FinalURL    string          `json:"finalURL"`
	Title       string          `json:"title"`
	Hash        string          `json:"hash"`
	Check       string          `json:"check"`
	Reason      string          `json:"reason"`
	ContentType string          `json:"contentType"`
	Err         string          `json:"err"`
	Timings     wire.JobTimings `json:"timings"`
}

// monitorView is a monitor as the API shows it.
type monitorView struct {
	ID              string          `json:"id"`
	Spec            wire.JobSpec    `json:"spec"`
	IntervalMs      int64           `json:"intervalMs"`
	Created         string          `json:"created"`
	NextRun         string          `json:"nextRun"`
	LastCheck       string          `json:"lastCheck"`
	State           string          `json:"state"`
	Reason          string          `json:"reason"`
	Hash            string          `json:"hash"`
	LastStateChange string          `json:"lastStateChange"`
	LastJob         string          `json:"lastJob"`
	Checks          json.RawMessage `json:"checks"`
}

// rawText prints a raw JSON value: strings unquoted, null/absent as "-".
func rawText(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return orDash(s)
	}
	if t := strings.TrimSpace(string(r)); t != "" && t != "null" {
		return t
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// when prints an RFC 3339 time in local time with how long ago it was;
// "-" when absent or zero.
func when(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return orDash(s)
	}
	if t.IsZero() || t.Year() <= 1 {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	rel := d.String() + " ago"
	if d < 0 {
		rel = "in " + (-d).String()
	}
	return t.Local().Format("2006-01-02 15:04:05") + " (" + rel + ")"
}

// decodeJobs reads a single job or a batch answer {"jobs": [...]}.
func decodeJobs(raw []byte) ([]jobView, error) {
	var batch struct {
		Jobs *[]jobView `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &batch); err == nil && batch.Jobs != nil {
		return *batch.Jobs, nil
	}
	var j jobView
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("unexpected answer from the master: %w", err)
	}
	return []jobView{j}, nil
}

// readSpecFile reads a JSON job or array of jobs and checks each one,
// naming the entry and field of the first problem.
func readSpecFile(path string) ([]byte, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("--file: %w", err)
	}
	b = bytes.TrimSpace(b)
	var specs []wire.JobSpec
	batch := len(b) > 0 && b[0] == '['
	if batch {
		err = json.Unmarshal(b, &specs)
	} else {
		var s wire.JobSpec
		err = json.Unmarshal(b, &s)
		specs = []wire.JobSpec{s}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("--file %s: not a JSON job or array of jobs: %w", path, err)
	}
	if len(specs) == 0 {
		return nil, 0, fmt.Errorf("--file %s: no jobs", path)
	}
	for i, s := range specs {
		if err := validateSpec(s); err != nil {
			if batch {
				return nil, 0, fmt.Errorf("--file %s: job %d: %w", path, i, err)
			}
			return nil, 0, fmt.Errorf("--file %s: %w", path, err)
		}
	}
	return b, len(specs), nil
}

func jobsCmd() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "submit, list, show, fetch and cancel render and check jobs",
		Description: `Jobs run in the cluster's browsers without anyone watching (docs/jobs.md). The
commands use <data-dir>/jobs.token unless --token is given.`,
		Commands: []*cli.Command{jobsSubmitCmd(), jobsListCmd(), jobsShowCmd(), jobsResultCmd(), jobsCancelCmd()},
	}
}

func jobsSubmitCmd() *cli.Command {
	return &cli.Command{
		Name:      "submit",
		Usage:     "queue one job per URL (or the jobs of --file) and print their ids",
		ArgsUsage: "URL...",
		Flags: append(append(apiFlags(jobsToken),
			&cli.StringFlag{Name: "kind", Value: wire.JobRender, Usage: "render or check"},
			&cli.StringFlag{Name: "file", Usage: "a JSON job, or array of jobs, as the API takes them (instead of URLs)"},
		), specFlags()...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			var body []byte
			if f := cmd.String("file"); f != "" {
				if cmd.Args().Len() > 0 {
					return fmt.Errorf("--file: give either --file or URLs, not both")
				}
				b, _, err := readSpecFile(f)
				if err != nil {
					return err
				}
				body = b
			} else {
				if cmd.Args().Len() == 0 {
					return fmt.Errorf("jobs submit needs at least one URL (or --file)")
				}
				var specs []wire.JobSpec
				for _, u := range cmd.Args().Slice() {
					s, err := specFromFlags(cmd, cmd.String("kind"), u)
					if err != nil {
						return err
					}
					specs = append(specs, s)
				}
				var err error
				if len(specs) == 1 {
					body, err = json.Marshal(specs[0])
				} else {
					body, err = json.Marshal(specs)
				}
				if err != nil {
					return err
				}
			}
			c, err := newAPIClient(cmd, jobsToken)
			if err != nil {
				return err
			}
			raw, resp, err := c.send(ctx, http.MethodPost, "/api/v1/jobs", bytes.NewReader(body), "application/json")
			if err != nil {
				return err
			}
			jobs, err := decodeJobs(raw)
			if err != nil {
				return err
			}
			hit := resp.Header.Get("X-Cache") == "HIT"
			w := stdout(cmd)
			for _, j := range jobs {
				note := j.State
				switch {
				case hit:
					note += " (cache hit)"
				case j.GeneratingSince != "":
					note += " (same render already generating since " + when(j.GeneratingSince) + ")"
				case j.Reason != "":
					note += " (" + j.Reason + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", j.ID, note, j.Spec.URL)
			}
			return nil
		},
	}
}

var jobStates = []string{wire.JobQueued, wire.JobWorking, wire.JobDone, wire.JobFailed, wire.JobDisallowed, wire.JobCancelled}

func oneOf(v string, set []string) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

func jobsListCmd() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list jobs, newest first",
		Flags: append(apiFlags(jobsToken),
			&cli.StringFlag{Name: "state", Usage: "only jobs in this state: " + strings.Join(jobStates, ", ")},
			&cli.IntFlag{Name: "limit", Usage: "at most this many (0: the master's default)"},
			&cli.StringFlag{Name: "after", Usage: "continue after this cursor (printed as next: by the previous page)"},
			&cli.StringFlag{Name: "user", Usage: "only the jobs this principal submitted (admin token; others list only their own)"},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			q := url.Values{}
			if u := cmd.String("user"); u != "" {
				q.Set("user", u)
			}
			if st := cmd.String("state"); st != "" {
				if !oneOf(st, jobStates) {
					return fmt.Errorf("--state: must be one of %s, not %q", strings.Join(jobStates, ", "), st)
				}
				q.Set("state", st)
			}
			if n := cmd.Int("limit"); n != 0 {
				if n < 0 {
					return fmt.Errorf("--limit: must be at least 1")
				}
				q.Set("limit", strconv.Itoa(int(n)))
			}
			if a := cmd.String("after"); a != "" {
				q.Set("after", a)
			}
			c, err := newAPIClient(cmd, jobsToken)
			if err != nil {
				return err
			}
			path := "/api/v1/jobs"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var page struct {
				Jobs []jobView `json:"jobs"`
				Next string    `json:"next"`
			}
			if err := c.do(ctx, http.MethodGet, path, nil, "", &page); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tKIND\tURL\tCLASS\tTRIES\tWORKER\tCREATED\tREASON")
			for _, j := range page.Jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.State, j.Spec.Kind, j.Spec.URL,
					orDash(j.Class), j.Tries, orDash(j.Worker), when(j.Created), orDash(j.Reason))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.Next != "" {
				fmt.Fprintf(stdout(cmd), "next: %s (--after %s)\n", page.Next, page.Next)
			}
			return nil
		},
	}
}

// idClient is oneID and the API client with the jobs token, which every
// command about one job or monitor needs.
func idClient(cmd *cli.Command, what string) (string, *apiClient, error) {
	id, err := oneID(cmd, what)
	if err != nil {
		return "", nil, err
	}
	c, err := newAPIClient(cmd, jobsToken)
	return id, c, err
}

// oneID checks that a command got exactly one job or monitor id.
func oneID(cmd *cli.Command, what string) (string, error) {
	if cmd.Args().Len() != 1 || cmd.Args().First() == "" {
		return "", fmt.Errorf("%s needs one argument: the %s id", cmd.FullName(), what)
	}
	return cmd.Args().First(), nil
}

func jobsShowCmd() *cli.Command {
	return &cli.Command{
		Name: "show", Usage: "show a job: state, attempts, result and timings", ArgsUsage: "ID",
		Flags: append(apiFlags(jobsToken), &cli.BoolFlag{Name: "json", Usage: "print the raw JSON"}),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, c, err := idClient(cmd, "job")
			if err != nil {
				return err
			}
			raw, _, err := c.send(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id), nil, "")
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				_, err := stdout(cmd).Write(append(raw, '\n'))
				return err
			}
			var j jobView
			if err := json.Unmarshal(raw, &j); err != nil {
				return fmt.Errorf("unexpected answer from the master: %w", err)
			}
			printJob(stdout(cmd), &j)
			return nil
		},
	}
}

func printJob(out io.Writer, j *jobView) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	line("id", j.ID)
	line("state", j.State)
	if j.Reason != "" {
		line("reason", j.Reason)
	}
	if d := rawText(j.Disallow); d != "-" && d != "false" {
		line("disallowed by", d)
	}
	line("kind", j.Spec.Kind)
	line("url", j.Spec.URL)
	if j.Spec.App != "" {
		line("app", "/"+j.Spec.App)
	}
	if j.Spec.Kind == wire.JobRender {
		f := orDash(j.Spec.Format)
		if j.Spec.Width != 0 {
			f += fmt.Sprintf(", %dx%d", j.Spec.Width, j.Spec.Height)
		}
		if j.Spec.FullPage {
			f += ", full page"
		}
		line("format", f)
	}
	line("class", orDash(j.Class))
	if b := rawText(j.Budget); b != "-" {
		line("budget", b)
	}
	if m := rawText(j.Monitor); m != "-" {
		line("monitor", m)
	}
	line("created", when(j.Created))
	line("started", when(j.Started))
	line("finished", when(j.Finished))
	if j.Deadline != "" {
		line("deadline", when(j.Deadline))
	}
	line("worker", orDash(j.Worker))
	line("tries", strconv.Itoa(j.Tries))
	if r := j.Result; r != nil {
		line("status", strconv.Itoa(r.Status))
		line("final url", orDash(r.FinalURL))
		line("title", orDash(r.Title))
		if r.Check != "" {
			c := r.Check
			if r.Reason != "" {
				c += " (" + r.Reason + ")"
			}
			line("check", c)
		}
		if r.ContentType != "" {
			line("content type", r.ContentType)
		}
		line("hash", orDash(r.Hash))
		if r.Err != "" {
			line("error", r.Err)
		}
		t := r.Timings
		line("timings", fmt.Sprintf("lease %d ms, navigate %d ms, wait %d ms, capture %d ms, total %d ms",
			t.LeaseMs, t.NavigateMs, t.WaitMs, t.CaptureMs, t.TotalMs))
	}
	tw.Flush()
	if len(j.Attempts) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tWORKER\tSTARTED\tENDED\tERROR")
		for _, a := range j.Attempts {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.N, orDash(a.Worker), when(a.Started), when(a.Ended), orDash(a.Err))
		}
		tw.Flush()
	}
}

func jobsResultCmd() *cli.Command {
	return &cli.Command{
		Name: "result", Usage: "fetch a finished job's result (a render's bytes, a check's outcome)", ArgsUsage: "ID",
		Flags: append(apiFlags(jobsToken), outputFlag("file to write (- or absent: stdout)")),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneID(cmd, "job")
			if err != nil {
				return err
			}
			out := cmd.String("output")
			if out == "" {
				out = "-"
			}
			c, err := newAPIClient(cmd, jobsToken)
			if err != nil {
				return err
			}
			body, resp, err := c.send(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id)+"/result", nil, "")
			if err != nil {
				return err
			}
			if err := writeOutput(cmd, out, body); err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(stdout(cmd), "%d bytes, %s → %s\n", len(body), orDash(resp.Header.Get("Content-Type")), out)
			}
			return nil
		},
	}
}

func jobsCancelCmd() *cli.Command {
	return &cli.Command{
		Name: "cancel", Usage: "cancel a queued or running job", ArgsUsage: "ID",
		Flags: apiFlags(jobsToken),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, c, err := idClient(cmd, "job")
			if err != nil {
				return err
			}
			var j jobView
			if err := c.do(ctx, http.MethodDelete, "/api/v1/jobs/"+url.PathEscape(id), nil, "", &j); err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "%s: %s\n", orDash(j.ID), j.State)
			return nil
		},
	}
}

var monitorStates = []string{wire.CheckOK, wire.CheckChanged, wire.CheckUnavailable, wire.CheckError}

func monitorCmd() *cli.Command {
	return &cli.Command{
		Name:  "monitor",
		Usage: "add, list and remove monitors: URLs checked (or rendered) on a schedule",
		Commands: []*cli.Command{
			{
				Name: "add", Usage: "check (or render) a URL every --every", ArgsUsage: "URL",
				Flags: append(append(apiFlags(jobsToken),
					&cli.DurationFlag{Name: "every", Usage: "interval between runs, e.g. 5m (at least 10s); required"},
					&cli.StringFlag{Name: "kind", Value: wire.JobCheck, Usage: "check or render"},
				), specFlags()...),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() != 1 {
						return fmt.Errorf("monitor add needs one argument: the URL")
					}
					every := cmd.Duration("every")
					if every < minMonitorEvery {
						return fmt.Errorf("--every: must be at least %s (got %s)", minMonitorEvery, every)
					}
					if cmd.Bool("ignore-robots") {
						return fmt.Errorf("--ignore-robots: not for monitors (they always honour robots.txt)")
					}
					s, err := specFromFlags(cmd, cmd.String("kind"), cmd.Args().First())
					if err != nil {
						return err
					}
					body, err := monitorBody(s, every)
					if err != nil {
						return err
					}
					c, err := newAPIClient(cmd, jobsToken)
					if err != nil {
						return err
					}
					var m monitorView
					if err := c.do(ctx, http.MethodPost, "/api/v1/monitors", bytes.NewReader(body), "application/json", &m); err != nil {
						return err
					}
					fmt.Fprintf(stdout(cmd), "monitor %s: %s %s every %s, next run %s\n", m.ID, orDash(m.Spec.Kind), m.Spec.URL,
						time.Duration(m.IntervalMs)*time.Millisecond, when(m.NextRun))
					return nil
				},
			},
			{
				Name: "list", Usage: "list monitors with their state, last check and last change",
				Flags: append(apiFlags(jobsToken),
					&cli.StringFlag{Name: "state", Usage: "only monitors in this state: " + strings.Join(monitorStates, ", ")},
					&cli.StringFlag{Name: "checked-after", Usage: "only monitors last checked at or after this time (RFC 3339, or a duration ago: 1h)"},
					&cli.StringFlag{Name: "checked-before", Usage: "only monitors last checked before this time"},
					&cli.StringFlag{Name: "changed-after", Usage: "only monitors whose state last changed at or after this time"},
					&cli.StringFlag{Name: "changed-before", Usage: "only monitors whose state last changed before this time"},
					&cli.StringFlag{Name: "sort", Usage: "newest first by lastCheck or lastStateChange"}),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					q := url.Values{}
					if st := cmd.String("state"); st != "" {
						if !oneOf(st, monitorStates) {
							return fmt.Errorf("--state: must be one of %s, not %q", strings.Join(monitorStates, ", "), st)
						}
						q.Set("state", st)
					}
					for flag, param := range map[string]string{"checked-after": "checkedAfter", "checked-before": "checkedBefore",
						"changed-after": "changedAfter", "changed-before": "changedBefore", "sort": "sort"} {
						if v := cmd.String(flag); v != "" {
							q.Set(param, v) // the API checks them and names the field
						}
					}
					path := "/api/v1/monitors"
					if len(q) > 0 {
						path += "?" + q.Encode()
					}
					c, err := newAPIClient(cmd, jobsToken)
					if err != nil {
						return err
					}
					var list struct {
						Monitors []monitorView `json:"monitors"`
					}
					if err := c.do(ctx, http.MethodGet, path, nil, "", &list); err != nil {
						return err
					}
					tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSTATE\tKIND\tURL\tEVERY\tLAST CHECK\tLAST CHANGE\tREASON")
					for _, m := range list.Monitors {
						st := m.State
						if st == "" {
							st = "(not checked yet)"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, st, m.Spec.Kind, m.Spec.URL,
							time.Duration(m.IntervalMs)*time.Millisecond, when(m.LastCheck), when(m.LastStateChange), orDash(m.Reason))
					}
					return tw.Flush()
				},
			},
			{
				Name: "remove", Usage: "remove a monitor", ArgsUsage: "ID", Flags: apiFlags(jobsToken),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, c, err := idClient(cmd, "monitor")
					if err != nil {
						return err
					}
					if err := c.do(ctx, http.MethodDelete, "/api/v1/monitors/"+url.PathEscape(id), nil, "", nil); err != nil {
						return err
					}
					fmt.Fprintf(stdout(cmd), "monitor %s: removed\n", id)
					return nil
				},
			},
		},
	}
}

// monitorBody is POST /api/v1/monitors's body: the spec's fields plus the
// interval as a Go duration string.
func monitorBody(s wire.JobSpec, every time.Duration) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["interval"] = every.String()
	return json.Marshal(m)
}

func cacheCmd() *cli.Command {
	return &cli.Command{
		Name:  "cache",
		Usage: "manage the render cache",
		Commands: []*cli.Command{{
			Name: "purge", Usage: "drop every cached render of a URL", ArgsUsage: "URL", Flags: apiFlags(jobsToken),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 1 {
					return fmt.Errorf("cache purge needs one argument: the URL")
				}
				u := cmd.Args().First()
				if err := validateSpec(wire.JobSpec{Kind: wire.JobRender, URL: u}); err != nil {
					return flagError(err)
				}
				body, err := json.Marshal(map[string]string{"url": u})
				if err != nil {
					return err
				}
				c, err := newAPIClient(cmd, jobsToken)
				if err != nil {
					return err
				}
				var got struct {
					Purged int `json:"purged"`
				}
				if err := c.do(ctx, http.MethodPost, "/api/v1/cache/purge", bytes.NewReader(body), "application/json", &got); err != nil {
					return err
				}
				fmt.Fprintf(stdout(cmd), "purged %d cached renders of %s\n", got.Purged, u)
				return nil
			},
		}},
	}
}
