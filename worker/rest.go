package worker

import "time"

// DefaultRestAfter is the default Config.RestAfter, after which a browser
// without a client rests (engine.Hub.StartRest): long enough that a reload
// or a reconnecting client engine finds the page awake.
const DefaultRestAfter = 10 * time.Second
