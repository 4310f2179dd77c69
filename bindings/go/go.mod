module pkv.local/pkv

go 1.19
