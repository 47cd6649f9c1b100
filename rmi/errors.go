package rmi

import (
	"context"
	"errors"
	"fmt"
)

// Failure kinds of the rmi package itself. Errors returned by this package
// wrap one of these, so callers branch with errors.Is. The kinds that a peer
// reports in an error reply (ErrNoObject, ErrNoMethod, ErrBadArgs, ErrPanic,
// ErrFrameTooLarge) arrive as *RemoteError, whose Is method maps the wire code
// back to the sentinel.
var (
	// ErrClosed: the connection, node or client is closed. Every Conn.Err
	// value wraps it, whatever the underlying cause.
	ErrClosed = errors.New("rmi: closed")
	// ErrAuth: the peer failed the mutual HMAC handshake (wrong secret).
	ErrAuth = errors.New("rmi: authentication failed")
	// ErrNoObject: no object is registered (or exported) under that name or id.
	ErrNoObject = errors.New("rmi: no such object")
	// ErrNoMethod: the object has no eligible method of that name.
	ErrNoMethod = errors.New("rmi: no such method")
	// ErrBadArgs: argument count or types do not match the method, or a
	// result could not be decoded into the reply target.
	ErrBadArgs = errors.New("rmi: bad arguments")
	// ErrPanic: the remote method panicked (the panic was recovered there).
	ErrPanic = errors.New("rmi: remote method panicked")
	// ErrFrameTooLarge: a frame exceeded Config.MaxFrame.
	ErrFrameTooLarge = errors.New("rmi: frame too large")
	// ErrForbidden: the caller's role may not call that object
	// (Node.RegisterFor).
	ErrForbidden = errors.New("rmi: forbidden for this role")
	// ErrProtocol: the peer sent something that is not valid protocol
	// (undecodable frame, unknown kind, version mismatch).
	ErrProtocol = errors.New("rmi: protocol error")
)

// Wire codes for the package's own failure kinds, sent in error replies.
// Application codes (via RMICode) should not use the "rmi." prefix.
const (
	CodeNoObject      = "rmi.no_object"
	CodeNoMethod      = "rmi.no_method"
	CodeBadArgs       = "rmi.bad_args"
	CodePanic         = "rmi.panic"
	CodeFrameTooLarge = "rmi.frame_too_large"
	CodeEncode        = "rmi.encode"
	CodeForbidden     = "rmi.forbidden"
	CodeCanceled      = "rmi.canceled"
	CodeDeadline      = "rmi.deadline"
)

// codeErrs maps wire codes to what RemoteError.Is reports, so that a
// caller's errors.Is works across the connection.
var codeErrs = map[string]error{
	CodeNoObject:      ErrNoObject,
	CodeNoMethod:      ErrNoMethod,
	CodeBadArgs:       ErrBadArgs,
	CodePanic:         ErrPanic,
	CodeFrameTooLarge: ErrFrameTooLarge,
	CodeEncode:        ErrBadArgs,
	CodeForbidden:     ErrForbidden,
	CodeCanceled:      context.Canceled,
	CodeDeadline:      context.DeadlineExceeded,
}

// RemoteError is what a caller gets when the remote method (or the remote
// dispatcher) returned an error. Code is the callee error's RMICode() if it
// had one, one of the Code* constants for rmi's own failures, or "".
type RemoteError struct {
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	if e.Code == "" {
		return "rmi: remote error: " + e.Message
	}
	return fmt.Sprintf("rmi: remote error [%s]: %s", e.Code, e.Message)
}

// Is reports whether the wire code corresponds to target, e.g.
// errors.Is(err, ErrNoObject) for Code == CodeNoObject.
func (e *RemoteError) Is(target error) bool {
	s, ok := codeErrs[e.Code]
	return ok && s == target
}

// RMICode lets a method that forwards a RemoteError (e.g. a proxy relaying a
// worker's failure) pass the original code on to its own caller.
func (e *RemoteError) RMICode() string { return e.Code }

// coder is what a callee error implements to choose its wire code.
type coder interface{ RMICode() string }

// codedError is an error carrying a wire code, used for rmi's own dispatch
// failures on the callee side; it also wraps the local sentinel for logging.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string   { return e.err.Error() }
func (e *codedError) Unwrap() error   { return e.err }
func (e *codedError) RMICode() string { return e.code }

func newCoded(code string, sentinel error, format string, args ...any) error {
	return &codedError{code: code, err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)}
}

const maxErrMsg = 16 << 10

// toWire converts a callee error into the reply's error payload.
func toWire(err error) *wireError {
	msg := err.Error()
	if len(msg) > maxErrMsg { // keep error replies far below any sane MaxFrame
		msg = msg[:maxErrMsg] + "...(truncated)"
	}
	w := &wireError{Message: msg}
	var c coder
	switch {
	case errors.As(err, &c):
		w.Code = c.RMICode()
	case errors.Is(err, context.DeadlineExceeded):
		w.Code = CodeDeadline
	case errors.Is(err, context.Canceled):
		w.Code = CodeCanceled
	}
	return w
}
