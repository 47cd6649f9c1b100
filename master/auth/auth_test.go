package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// TestCheck: who each token acts as, and what each role lets through;
// the dashboard cookie acts as the admin, a change needing the CSRF header.
func TestCheck(t *testing.T) {
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{State: st, Now: time.Now, Login: DefaultLoginLimits(), Secret: "s3cret-s3cret-s3cret-s3cret-s3cret",
		Tokens: Tokens{Admin: "adm", Author: "aut", Jobs: "job", Automation: "bot"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := a.Authors().Add("bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookie := &http.Cookie{Name: AdminCookie, Value: a.Dashboard().Issue()}
	for _, tc := range []struct {
		name, token, method string
		cookie              bool
		need                Role
		want                Principal
		status              int // 0 = let through
	}{
		{"admin", "adm", "GET", false, RoleAdmin, AdminPrincipal, 0},
		{"shared author", "aut", "GET", false, RoleAuthor, Principal{Name: SharedAuthor}, 0},
		{"shared author, admin endpoint", "aut", "GET", false, RoleAdmin, Principal{}, http.StatusForbidden},
		{"per-author token", bob, "POST", false, RoleAuthor, Principal{Name: "bob"}, 0},
		{"jobs token", "job", "GET", false, RoleJobs, Principal{Name: JobsPrincipal, JobsOnly: true}, 0},
		{"jobs token, author endpoint", "job", "GET", false, RoleAuthor, Principal{}, http.StatusForbidden},
		{"jobs token, sessions endpoint", "job", "POST", false, RoleAutomation, Principal{}, http.StatusForbidden},
		{"automation token", "bot", "POST", false, RoleAutomation, Principal{Name: AutomationPrincipal, AutomationOnly: true}, 0},
		{"automation token, jobs endpoint", "bot", "POST", false, RoleJobs, Principal{}, http.StatusForbidden},
		{"automation token, author endpoint", "bot", "POST", false, RoleAuthor, Principal{}, http.StatusForbidden},
		{"automation token, admin endpoint", "bot", "GET", false, RoleAdmin, Principal{}, http.StatusForbidden},
		{"shared author, sessions endpoint", "aut", "POST", false, RoleAutomation, Principal{Name: SharedAuthor}, 0},
		{"per-author token, sessions endpoint", bob, "GET", false, RoleAutomation, Principal{Name: "bob"}, 0},
		{"admin, sessions endpoint", "adm", "DELETE", false, RoleAutomation, AdminPrincipal, 0},
		{"admin, jobs endpoint", "adm", "GET", false, RoleJobs, AdminPrincipal, 0},
		{"no token", "", "GET", false, RoleJobs, Principal{}, http.StatusUnauthorized},
		{"wrong token", "nope", "GET", false, RoleJobs, Principal{}, http.StatusUnauthorized},
		{"dashboard cookie", "", "GET", true, RoleAdmin, AdminPrincipal, 0},
		{"dashboard cookie, change without the header", "", "POST", true, RoleAdmin, Principal{}, http.StatusForbidden},
	} {
		r := httptest.NewRequest(tc.method, "/api/v1/x", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.cookie {
			r.AddCookie(cookie)
		}
		p, refused := a.Check(r, tc.need)
		switch {
		case tc.status == 0 && (refused != nil || p != tc.want):
			t.Errorf("%s: got %+v, refused %+v; want %+v", tc.name, p, refused, tc.want)
		case tc.status != 0 && (refused == nil || refused.Status != tc.status):
			t.Errorf("%s: refused %+v, want status %d", tc.name, refused, tc.status)
		}
	}
}

// TestRefusalMessages: a token-only principal is told what its token is
// for, so a client using the wrong token learns which one it needs.
func TestRefusalMessages(t *testing.T) {
	for _, tc := range []struct {
		p    Principal
		need Role
		want string
	}{
		{Principal{Name: JobsPrincipal, JobsOnly: true}, RoleAutomation, "automation.token"},
		{Principal{Name: JobsPrincipal, JobsOnly: true}, RoleAuthor, "jobs token may only"},
		{Principal{Name: AutomationPrincipal, AutomationOnly: true}, RoleJobs, "/api/v1/sessions"},
		{Principal{Name: "bob"}, RoleAdmin, "needs the admin token"},
	} {
		r := tc.p.refusal(tc.need)
		if r == nil || r.Status != http.StatusForbidden || !strings.Contains(r.Msg, tc.want) {
			t.Errorf("%s at role %d: %+v, want 403 mentioning %q", tc.p.Name, tc.need, r, tc.want)
		}
	}
}

// An author may not take the automation token's name.
func TestAutomationNameReserved(t *testing.T) {
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAuthors(st, nil).Add(AutomationPrincipal, time.Now())
	if err == nil || !strings.Contains(err.Error(), "automation.token") {
		t.Fatalf("adding an author called %q: %v, want a refusal naming the token", AutomationPrincipal, err)
	}
}
