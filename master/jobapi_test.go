package master

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
)

func TestDecodeSpecs(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		n         int
		batch     bool
		wantError string
	}{
		{"one job", `{"kind":"check","url":"http://a/"}`, 1, false, ""},
		{"array", `[{"kind":"check","url":"http://a/"},{"kind":"render","url":"http://b/"}]`, 2, true, ""},
		{"jobs object", `{"jobs":[{"kind":"check","url":"http://a/"}]}`, 1, true, ""},
		{"misspelt option", `{"kind":"render","url":"http://a/","fullPages":true}`, 0, false, "unknown field"},
		{"empty", ` `, 0, false, "required"},
		{"not JSON", `kind=check`, 0, false, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, batch, err := decodeSpecs([]byte(tt.body))
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil || len(specs) != tt.n || batch != tt.batch {
				t.Fatalf("got %d specs, batch %v, err %v", len(specs), batch, err)
			}
		})
	}
}

func TestSpecFromQuery(t *testing.T) {
	tests := []struct {
		query string
		want  wire.JobSpec
		field string // "" = no error
	}{
		{"url=http://a/&format=pdf&width=800&height=600&fullPage=true&waitDelayMs=250&app=x",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", Format: "pdf", Width: 800, Height: 600, FullPage: true, WaitDelayMs: 250, App: "x"}, ""},
		{"url=http://a/&width=wide", wire.JobSpec{}, "width"},
		{"url=http://a/&timeoutMs=1.5s", wire.JobSpec{}, "timeoutMs"},
		{"url=http://a/&noCache=maybe", wire.JobSpec{}, "noCache"},
		{"url=http://a/&noCache=maybe&quality=high", wire.JobSpec{}, "quality"}, // the first bad field, in the spec's order
		{"url=http://a/&quality=40&maxAgeMs=5000&ignoreRobots=1&waitNetworkIdle=false",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", Quality: 40, MaxAgeMs: 5000, IgnoreRobots: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got, err := specFromQuery(httptest.NewRequest("GET", "/api/v1/render?"+tt.query, nil))
			var fe *jobs.FieldError
			if tt.field != "" {
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("err = %v, want a field error naming %s", err, tt.field)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func TestJobErrorStatus(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		retryAfter string
	}{
		{&jobs.FieldError{Field: "url", Msg: "bad"}, http.StatusBadRequest, ""},
		{&jobs.QueueFullError{RetryAfter: 3 * time.Second}, http.StatusTooManyRequests, "3"},
		{jobs.ErrNotFound, http.StatusNotFound, ""},
		{jobs.ErrFinished, http.StatusConflict, ""},
		{errors.New("disk full"), http.StatusInternalServerError, ""},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		jobError(w, tt.err)
		if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
			t.Errorf("%v: %d Retry-After %q, want %d %q", tt.err, w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter)
		}
	}
	w := httptest.NewRecorder()
	jobError(w, &jobs.FieldError{Field: "width", Msg: "too wide"})
	if !strings.Contains(w.Body.String(), `"field": "width"`) {
		t.Errorf("a 400 must name the field: %s", w.Body.String())
	}
}
