# fuzz.mk - builds the libFuzzer harnesses with clang, from pkv's own sources (CPU backend, no
# CUDA), everything instrumented (-fsanitize=fuzzer-no-link,address,undefined) so coverage and the
# sanitizers reach inside the block manager. Run by build.sh: make -f fuzz.mk SRC=<repo> OUT=<dir>.
# Incremental (-MD dependency files): a rerun recompiles only what changed.
CXX ?= clang++-14
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -g -O1
INC := -I$(SRC)/include -I$(SRC)/src
PKV_SRCS := $(filter-out %/cuda_backend.cpp,$(wildcard $(SRC)/src/*.cpp $(SRC)/src/backend/*.cpp \
              $(SRC)/src/backend/cpu/*.cpp $(SRC)/src/tiers/*.cpp))
PKV_OBJS := $(patsubst %.cpp,$(OUT)/obj/%.o,$(notdir $(PKV_SRCS)))
HARNESSES := $(OUT)/fuzz_api $(OUT)/fuzz_hf_config $(OUT)/fuzz_shape

all: $(HARNESSES)

vpath %.cpp $(SRC)/src $(SRC)/src/backend $(SRC)/src/backend/cpu $(SRC)/src/tiers

# clang 14 has no _Float16 on x86-64: the shim stands in (float16_shim.h); the baseline variant
# only (the one cpu_kernels.cpp names without PKV_HAVE_CPU_X86).
CPU_VARIANT_OBJS := $(OUT)/obj/cpu_attention.o $(OUT)/obj/cpu_decode.o $(OUT)/obj/cpu_prefill.o
$(CPU_VARIANT_OBJS): EXTRA := -DPKV_CPU_VARIANT=cpu_baseline -include $(SRC)/tests/fuzz/float16_shim.h

$(OUT)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -fsanitize=fuzzer-no-link $(SAN) $(INC) $(EXTRA) -MD -MP -c $< -o $@

$(OUT)/fuzz_%: $(SRC)/tests/fuzz/fuzz_%.c $(PKV_OBJS)
	$(CXX) -fsanitize=fuzzer $(SAN) $(INC) -x c -std=c11 -Wall -Wextra -MD -MP -MF $@.d $< \
	  -x none $(PKV_OBJS) -lxxhash -lcrypto -lhiredis -lpthread -o $@

-include $(PKV_OBJS:.o=.d) $(HARNESSES:=.d)
