module github.com/ntask/ntask-go

go 1.19

require github.com/jackc/pgx/v4 v4.18.3
