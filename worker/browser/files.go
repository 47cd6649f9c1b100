package browser

import "errors"

// Files crossing the browser's door: the page's file pickers, the files a
// user drops on it, and what it downloads. Which user's files go in and
// who may fetch a download are the worker's business; a Browser only
// speaks for its page.

// ErrNoChooser is returned by ChooseFiles for a picker that is not open
// (answered, cancelled, or its page gone).
var ErrNoChooser = errors.New("browser: no such file chooser")

// ErrNoDownload is returned by CancelDownload for a download not in
// progress.
var ErrNoDownload = errors.New("browser: no such download in progress")

// FileChooser is a file picker the page opened (an <input type=file>
// clicked, or showPicker()); the page waits for ChooseFiles.
type FileChooser struct {
	ID uint64
	// Multiple says the input takes several files.
	Multiple bool
	// Accept is the input's accept attribute ("image/*,.pdf"), a hint for
	// the user's own picker.
	Accept string
}

// DownloadState is where a download is.
type DownloadState string

// Download states (Chromium's).
const (
	DownloadInProgress DownloadState = "inProgress"
	DownloadCompleted  DownloadState = "completed"
	DownloadCanceled   DownloadState = "canceled"
)

// Download is a file the page downloads (a link with download, a
// Content-Disposition attachment, a blob URL), as it progresses.
type Download struct {
	// ID is unique within the browser (Chromium's guid).
	ID string
	// Name is the file name the page suggests.
	Name string
	URL  string
	// Total is its size in bytes (0 = unknown until it completes);
	// Received what came so far.
	Total, Received int64
	State           DownloadState
	// Path is the file in the downloads folder, once completed.
	Path string
}
