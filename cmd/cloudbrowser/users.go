package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/urfave/cli/v3"
)

// readPassword takes the password from CB_PASSWORD or the first line of
// standard input (never from a flag: flags show up in ps).
func readPassword() (string, error) {
	if p := os.Getenv("CB_PASSWORD"); p != "" {
		return p, nil
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("no password: pipe it on standard input (echo \"$PW\" | cloudbrowser users ...) or set CB_PASSWORD: %v", err)
	}
	return line, nil
}

func usersCmd() *cli.Command {
	withName := func(name, usage string, run func(ctx context.Context, c *apiClient, user string) error) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "USER", Flags: apiFlags("admin.token"),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 1 {
					return fmt.Errorf("users %s needs one argument: the user name", name)
				}
				c, err := newAPIClient(cmd, "admin.token")
				if err != nil {
					return err
				}
				return run(ctx, c, cmd.Args().First())
			},
		}
	}
	send := func(ctx context.Context, c *apiClient, method, path string, body any) error {
		b, _ := json.Marshal(body)
		return c.do(ctx, method, path, bytes.NewReader(b), "application/json", nil)
	}
	return &cli.Command{
		Name:  "users",
		Usage: "manage local user accounts (admin token; passwords are read from standard input or CB_PASSWORD)",
		Commands: []*cli.Command{
			withName("add", "create an account", func(ctx context.Context, c *apiClient, user string) error {
				pw, err := readPassword()
				if err != nil {
					return err
				}
				if err := send(ctx, c, http.MethodPost, "/api/v1/users", map[string]string{"name": user, "password": pw}); err != nil {
					return err
				}
				fmt.Printf("user %s created\n", user)
				return nil
			}),
			withName("passwd", "change an account's password", func(ctx context.Context, c *apiClient, user string) error {
				pw, err := readPassword()
				if err != nil {
					return err
				}
				if err := send(ctx, c, http.MethodPut, "/api/v1/users/"+user+"/password", map[string]string{"password": pw}); err != nil {
					return err
				}
				fmt.Printf("password of %s changed\n", user)
				return nil
			}),
			withName("remove", "delete an account", func(ctx context.Context, c *apiClient, user string) error {
				if err := c.do(ctx, http.MethodDelete, "/api/v1/users/"+user, nil, "", nil); err != nil {
					return err
				}
				fmt.Printf("user %s removed\n", user)
				return nil
			}),
			{
				Name: "list", Usage: "list accounts", Flags: apiFlags("admin.token"),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newAPIClient(cmd, "admin.token")
					if err != nil {
						return err
					}
					var names []string
					if err := c.do(ctx, http.MethodGet, "/api/v1/users", nil, "", &names); err != nil {
						return err
					}
					for _, n := range names {
						fmt.Println(n)
					}
					return nil
				},
			},
		},
	}
}

func shareCmd() *cli.Command {
	return &cli.Command{
		Name:      "share",
		Usage:     "grant a role on an app instance or virtual browser (admin token)",
		ArgsUsage: "URL PRINCIPAL reader|reader-writer|none",
		Description: `URL is an App-instance URL (/<app>/a/<id>) or a Browser URL (/<app>/a/<id>/b/<bid>),
with or without the scheme and host. PRINCIPAL is a user name, an anonymous id, or * for
anyone who has the URL. "none" revokes.`,
		Flags: apiFlags("admin.token"),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 3 {
				return fmt.Errorf("share needs three arguments: URL PRINCIPAL ROLE")
			}
			raw := cmd.Args().Get(0)
			if u, err := url.Parse(raw); err == nil && u.Path != "" {
				raw = u.Path
			}
			t := urlkind.Classify(http.MethodGet, raw, false)
			if t.InstanceID == "" || (t.Kind != urlkind.KindInstance && t.Kind != urlkind.KindBrowser) {
				return fmt.Errorf("URL %q is not an App-instance or Browser URL", cmd.Args().Get(0))
			}
			c, err := newAPIClient(cmd, "admin.token")
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]string{"instance": t.InstanceID, "browser": t.BrowserID,
				"principal": cmd.Args().Get(1), "role": cmd.Args().Get(2)})
			if err := c.do(ctx, http.MethodPost, "/api/v1/grants", bytes.NewReader(body), "application/json", nil); err != nil {
				return err
			}
			fmt.Printf("%s: %s is now %s\n", raw, cmd.Args().Get(1), cmd.Args().Get(2))
			return nil
		},
	}
}
