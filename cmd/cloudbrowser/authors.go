package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"
)

// authorsCmd manages per-author deploy tokens (admin token).
func authorsCmd() *cli.Command {
	client := func(cmd *cli.Command, verb string, args int) (*apiClient, error) {
		if cmd.Args().Len() != args {
			if args == 1 {
				return nil, fmt.Errorf("authors %s needs one argument: the author's name", verb)
			}
			return nil, fmt.Errorf("authors %s takes no arguments", verb)
		}
		return newAPIClient(cmd, "admin.token")
	}
	return &cli.Command{
		Name:  "authors",
		Usage: "manage application authors and their deploy tokens (admin token)",
		Description: `An author's token deploys applications; a mount point belongs to the author who deployed
it first, and only that author (or the admin token) may replace, disable or remove it.
The shared author token (<data-dir>/author.token) acts as the author "author".`,
		Commands: []*cli.Command{
			{
				Name: "add", Usage: "create an author and print its token (shown only this once)", ArgsUsage: "NAME",
				Flags: apiFlags("admin.token"),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := client(cmd, "add", 1)
					if err != nil {
						return err
					}
					body, _ := json.Marshal(map[string]string{"name": cmd.Args().First()})
					var out struct{ Name, Token string }
					if err := c.do(ctx, http.MethodPost, "/api/v1/authors", bytes.NewReader(body), "application/json", &out); err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "author %s created; its token is shown only now (deploy --token ...):\n", out.Name)
					fmt.Println(out.Token)
					return nil
				},
			},
			{
				Name: "list", Usage: "list the authors", Flags: apiFlags("admin.token"),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := client(cmd, "list", 0)
					if err != nil {
						return err
					}
					var out []struct {
						Name    string    `json:"name"`
						Created time.Time `json:"created"`
					}
					if err := c.do(ctx, http.MethodGet, "/api/v1/authors", nil, "", &out); err != nil {
						return err
					}
					tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "AUTHOR\tCREATED")
					for _, a := range out {
						fmt.Fprintf(tw, "%s\t%s\n", a.Name, a.Created.Format(time.RFC3339))
					}
					return tw.Flush()
				},
			},
			{
				Name: "remove", Usage: "remove an author: its token stops working (its apps stay, changeable by the admin)", ArgsUsage: "NAME",
				Flags: apiFlags("admin.token"),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := client(cmd, "remove", 1)
					if err != nil {
						return err
					}
					if err := c.do(ctx, http.MethodDelete, "/api/v1/authors/"+url.PathEscape(cmd.Args().First()), nil, "", nil); err != nil {
						return err
					}
					fmt.Printf("author %s removed\n", cmd.Args().First())
					return nil
				},
			},
		},
	}
}
