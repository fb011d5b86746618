# Every reproducer of the hostile-input report (issue 14) as a CLI regression test: exit code 1
# and a one-line error naming the file or flag (tests/cli/expect_error.sh). The inputs are made
# at test time by make_hostile_inputs (the cli.hostile.setup fixture) under the build folder.
add_executable(make_hostile_inputs ${CMAKE_CURRENT_SOURCE_DIR}/cli/make_hostile_inputs.cc)
target_link_libraries(make_hostile_inputs PRIVATE nlohmann_json::nlohmann_json)
target_compile_definitions(make_hostile_inputs PRIVATE DEEPINFER_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

set(hostile ${CMAKE_CURRENT_BINARY_DIR}/hostile)
add_test(NAME cli.hostile.setup COMMAND make_hostile_inputs ${hostile})
set_tests_properties(cli.hostile.setup PROPERTIES FIXTURES_SETUP hostile_inputs TIMEOUT 120)

# deepinfer_hostile_test(NAME REGEX ARGS...): `deepinfer ARGS...` must fail with one line matching REGEX.
function(deepinfer_hostile_test name regex)
  add_test(NAME cli.hostile.${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh "${regex}"
                                            $<TARGET_FILE:deepinfer> ${ARGN})
  set_tests_properties(cli.hostile.${name} PROPERTIES FIXTURES_REQUIRED hostile_inputs TIMEOUT 60)
endfunction()

set(gen1 --prompt-ids 1 --max-tokens 1)
set(shard1 model-00001-of-00002[.]safetensors)

# Crashes: deep nesting, 1e400, overflow before range checks.
deepinfer_hostile_test(deep_shape "^error: .*/deep_shape/${shard1}: tensor '.*': .shape. must be an array of integers, found array$"
                       inspect --model ${hostile}/deep_shape)
deepinfer_hostile_test(deep_offsets "^error: .*/deep_data_offsets/${shard1}: tensor '.*': .data_offsets. must be .begin, end. with non-negative integers, got a nested array$"
                       inspect --model ${hostile}/deep_data_offsets)
deepinfer_hostile_test(deep_eos "^error: .*/deep_eos/config[.]json: JSON nested deeper than 68 levels"
                       inspect --model ${hostile}/deep_eos)
foreach(kind content text tool)
  deepinfer_hostile_test(chat_deep_${kind}
                         "^deepinfer chat-template: error: .*/chat_deep_${kind}[.]json: JSON nested deeper than 128 levels"
                         chat-template --messages ${hostile}/chat_deep_${kind}.json)
endforeach()
deepinfer_hostile_test(config_1e400 "^error: .*/config_1e400/config[.]json: not valid JSON: number overflow parsing '1e400'"
                       generate --model ${hostile}/config_1e400 ${gen1})
deepinfer_hostile_test(chat_1e400 "^deepinfer chat-template: error: .*/chat_1e400[.]json: not valid JSON: number overflow"
                       chat-template --messages ${hostile}/chat_1e400.json)
deepinfer_hostile_test(hc_mult "/hc_mult/config[.]json: text_config[.]hc_mult: 2147483647 exceeds the supported maximum of 16$"
                       generate --model ${hostile}/hc_mult ${gen1})
deepinfer_hostile_test(hidden_size "text_config[.]hidden_size: 4611686018427387904 exceeds the supported maximum of 65536$"
                       generate --model ${hostile}/hidden_size ${gen1})
deepinfer_hostile_test(engram_ngram "text_config[.]engram_max_ngram_size: 2147483647 exceeds the supported maximum of 16$"
                       generate --model ${hostile}/engram_ngram ${gen1})
deepinfer_hostile_test(engram_vocab "text_config[.]engram_vocab_size: 4611686018427387904 exceeds the supported maximum"
                       generate --model ${hostile}/engram_vocab ${gen1})
deepinfer_hostile_test(added_token_int32max "^deepinfer tokenize: error: .*tok_added_int32max[.]json: added_tokens entry: id 2147483647 is outside"
                       tokenize --tokenizer ${hostile}/tok_added_int32max.json --text x)
deepinfer_hostile_test(serving_input_len "^error: --input-len: 9223372036854775807 exceeds the maximum of 16777216$"
                       bench --serving --input-len 9223372036854775807)

# Hangs and runaway memory.
deepinfer_hostile_test(index_fifo "/idx_fifo/model[.]safetensors[.]index[.]json: not a regular file [(]a FIFO[)] [(]the shard index[)]$"
                       inspect --model ${hostile}/idx_fifo)
deepinfer_hostile_test(shard_fifo "/shard_fifo/${shard1}: not a regular file [(]a FIFO[)] [(]shard listed in "
                       inspect --model ${hostile}/shard_fifo)
deepinfer_hostile_test(tokenizer_fifo "/tok_fifo/tokenizer[.]json: not a regular file [(]a FIFO[)] [(]the tokenizer[)]$"
                       generate --model ${hostile}/tok_fifo ${gen1})
deepinfer_hostile_test(tokenize_fifo "^deepinfer tokenize: error: .*/fifo[.]json: not a regular file [(]a FIFO[)]$"
                       tokenize --tokenizer ${hostile}/fifo.json --text x)
deepinfer_hostile_test(threads_100000 "^error: --threads: 100000 is more than 4 threads per hardware thread"
                       generate ${gen1} --threads 100000)
deepinfer_hostile_test(threads_wrap "^error: --threads: 4294967297 is more than 4 threads per hardware thread"
                       generate ${gen1} --threads 4294967297)
deepinfer_hostile_test(bench_threads "^error: --threads: 100000 is more than 4 threads per hardware thread"
                       bench --serving --threads 100000)
deepinfer_hostile_test(experts_1e6 "text_config[.]n_routed_experts: 1000000 exceeds the supported maximum of 4096$"
                       inspect --model ${hostile}/experts_1e6)
deepinfer_hostile_test(experts_2e9 "text_config[.]n_routed_experts: 2000000000 exceeds the supported maximum of 4096$"
                       inspect --model ${hostile}/experts_2e9)
deepinfer_hostile_test(sinkhorn_1e9 "text_config[.]hc_sinkhorn_iters: 1000000000 exceeds the supported maximum of 1000$"
                       generate --model ${hostile}/sinkhorn_1e9 ${gen1})
deepinfer_hostile_test(compress_10m "/compress_10m/config[.]json: [0-9]+ bytes exceed the 1048576-byte limit for this file$"
                       inspect --model ${hostile}/compress_10m)
deepinfer_hostile_test(vocab_300m "^deepinfer tokenize: error: .*/tok_vocab_300m[.]json: model[.]vocab..b..: id 300000000 is outside .0, 16777216. .the largest supported vocabulary.$"
                       tokenize --tokenizer ${hostile}/tok_vocab_300m.json --text x)
deepinfer_hostile_test(vocab_300m_model "/tok_vocab_model/tokenizer[.]json: model[.]vocab..b..: id 300000000 is outside"
                       generate --model ${hostile}/tok_vocab_model ${gen1})
deepinfer_hostile_test(tokenize_dev_zero "^deepinfer tokenize: error: --file: /dev/zero: not a regular file [(]a character device[)]$"
                       tokenize --tokenizer ${PROJECT_SOURCE_DIR}/data/tokenizer/tokenizer.json --file /dev/zero)
deepinfer_hostile_test(tokenize_directory "^deepinfer tokenize: error: --file: .*/a_directory: not a regular file [(]a directory[)]$"
                       tokenize --tokenizer ${PROJECT_SOURCE_DIR}/data/tokenizer/tokenizer.json --file ${hostile}/a_directory)
deepinfer_hostile_test(serving_num_requests "^error: --num-requests: 100000000 exceeds the maximum of 1048576$"
                       bench --serving --num-requests 100000000)

# Silent wrong results and trust.
deepinfer_hostile_test(gap8 "/gap8/${shard1}: the tensors cover [0-9]+ bytes but the data section holds [0-9]+ [(]8 bytes belong to no tensor"
                       inspect --model ${hostile}/gap8)
deepinfer_hostile_test(index_dotdot "/idx_dotdot: file name '[.][.]/[.][.]/.*' climbs out with '[.][.]'; model files must be inside the model directory"
                       inspect --model ${hostile}/idx_dotdot)
deepinfer_hostile_test(index_absolute "/idx_absolute: file name '/etc/passwd' is an absolute path"
                       inspect --model ${hostile}/idx_absolute)
deepinfer_hostile_test(index_symlink "/idx_symlink/outside[.]safetensors: resolves to /etc/passwd, outside the model directory"
                       inspect --model ${hostile}/idx_symlink)
deepinfer_hostile_test(tokenizer_symlink "/tok_outside/tokenizer[.]json: resolves to /etc/passwd, outside the model directory"
                       generate --model ${hostile}/tok_outside ${gen1})
deepinfer_hostile_test(index_dangling "/idx_dangling/model[.]safetensors[.]index[.]json: a dangling symlink [(]the shard index[)]$"
                       inspect --model ${hostile}/idx_dangling)
deepinfer_hostile_test(index_loop "/idx_loop/model[.]safetensors[.]index[.]json: a symlink loop [(]the shard index[)]$"
                       inspect --model ${hostile}/idx_loop)
deepinfer_hostile_test(make_model_tokenizer "^error: /etc/passwd: not valid JSON: "
                       make-model --preset v41-flash-slice --layers 1 --experts 6 --vocab 512 --out ${hostile}/make_model_out
                       --tokenizer /etc/passwd)
deepinfer_hostile_test(sliding_window "text_config[.]sliding_window: 2147483647 exceeds the supported maximum of 1048576$"
                       generate --model ${hostile}/sliding_window ${gen1})
deepinfer_hostile_test(vocab_2pow31m2 "tok_vocab_2pow31m2[.]json: model[.]vocab..b..: id 2147483646 is outside"
                       tokenize --tokenizer ${hostile}/tok_vocab_2pow31m2.json --text x)
deepinfer_hostile_test(config_fifo "/cfg_fifo/config[.]json: not a regular file [(]a FIFO[)] [(]the model config[)]$"
                       inspect --model ${hostile}/cfg_fifo)
deepinfer_hostile_test(config_directory "/cfg_dir/config[.]json: not a regular file [(]a directory[)] [(]the model config[)]$"
                       inspect --model ${hostile}/cfg_dir)
deepinfer_hostile_test(config_loop "/cfg_loop/config[.]json: a symlink loop [(]the model config[)]$"
                       inspect --model ${hostile}/cfg_loop)
deepinfer_hostile_test(serving_all_fail "^error: bench --serving: 2 of 2 requests failed [(]first: "
                       bench --serving --num-requests 2 --input-len 64 --output-len 2 --kv-cache-memory 1K)
deepinfer_hostile_test(default_model_folder "/tmp_public/deepinfer-[0-9]+: not a private folder of this user [(]a directory, owner uid [0-9]+, mode 0777"
                       inspect)
set_tests_properties(cli.hostile.default_model_folder PROPERTIES ENVIRONMENT TMPDIR=${hostile}/tmp_public)
# Flags that used to wrap when narrowed.
deepinfer_hostile_test(prompt_id_wrap "^error: --prompt-ids: 4294967297 exceeds the maximum of 2147483647$"
                       generate --prompt-ids 4294967297 --max-tokens 1)
deepinfer_hostile_test(negative_seed "^error: --seed: must be at least 0, got -1$" generate ${gen1} --seed -1)
