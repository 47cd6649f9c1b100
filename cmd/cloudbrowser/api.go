package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
)

// apiFlags are the flags of commands that talk to the master's admin API.
func apiFlags(tokenFile string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "master", Value: "http://127.0.0.1:8080", Sources: cli.EnvVars("CB_MASTER_URL"),
			Usage: "the master's admin URL (with up: the public URL)"},
		&cli.StringFlag{Name: "token", Sources: cli.EnvVars("CB_TOKEN"),
			Usage: "API token (default: read from <data-dir>/" + tokenFile + ")"},
		dataDirFlag,
	}
}

// apiClient calls the admin API with a token.
type apiClient struct {
	base, token string
	http        *http.Client
}

func newAPIClient(cmd *cli.Command, tokenFile string) (*apiClient, error) {
	token := cmd.String("token")
	if token == "" {
		path := filepath.Join(cmd.String("data-dir"), tokenFile)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--token not given and the token could not be read: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return nil, fmt.Errorf("--token not given and %s is empty: restore it from a backup, or delete it and restart the master to generate a new one", path)
		}
	}
	base := strings.TrimRight(cmd.String("master"), "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	return &apiClient{base: base, token: token, http: &http.Client{Timeout: 10 * time.Minute}}, nil
}

// apiError is the master's JSON error answer.
type apiError struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
	// Field names the request field the error is about (jobs API).
	Field    string `json:"field"`
	Problems []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"problems"`
}

// do sends a request and decodes a 2xx JSON answer into out (if not nil).
func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	raw, _, err := c.send(ctx, method, path, body, contentType)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("unexpected answer from the master: %w", err)
	}
	return nil
}

// send sends a request and returns a 2xx answer's body and headers; any
// other answer is an error carrying the master's message.
func (c *apiClient) send(ctx context.Context, method, path string, body io.Reader, contentType string) ([]byte, *http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, nil, fmt.Errorf("--master %q: %w", c.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("asking the master at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the master's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, resp, answerError(resp, raw)
	}
	return raw, resp, nil
}

// answerError turns a non-2xx answer into an error with the master's
// message, the field it names and when to retry.
func answerError(resp *http.Response, raw []byte) error {
	var e apiError
	if json.Unmarshal(raw, &e) != nil || e.Error == "" {
		return fmt.Errorf("master answered %s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	msg := fmt.Sprintf("master answered %s: %s", resp.Status, e.Error)
	if e.Field != "" {
		msg += fmt.Sprintf(" (field %q)", e.Field)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if _, err := strconv.Atoi(ra); err == nil {
			ra += "s" // seconds, else an HTTP date
		}
		msg += fmt.Sprintf(" (retry after %s)", ra)
	}
	for _, p := range e.Problems {
		msg += fmt.Sprintf("\n  %s: %s", p.Field, p.Message)
	}
	return fmt.Errorf("%s", msg)
}
