module colibri.dev/colibri

go 1.19
