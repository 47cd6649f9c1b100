// Package archtest holds the codebase to its architecture rules: how large
// a package and a type may grow, and which packages may depend on which.
// It has no code of its own. Its tests parse the module's Go sources with
// go/parser (and ask the go command for the import graph) and fail naming
// every package or type that breaks a rule, with its count.
package archtest
