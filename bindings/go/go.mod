module onesync.dev/go/onesync

go 1.21

require github.com/mattn/go-sqlite3 v1.14.53
