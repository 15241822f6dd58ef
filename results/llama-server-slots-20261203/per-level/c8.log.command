llama-server -m inkling-mini-seed7.gguf --host 127.0.0.1 --port 53249 -t 2 -np 8 -c 3072 --alias inkling-mini
