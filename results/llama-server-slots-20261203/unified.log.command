llama-server -m inkling-mini-seed7.gguf --host 127.0.0.1 --port 33599 -t 2 -np 176 -c 67584 --alias inkling-mini --kv-unified
