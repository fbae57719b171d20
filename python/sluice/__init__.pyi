# stubs: to write
