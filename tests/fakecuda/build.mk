# Builds the fake CUDA driver and the stand-in program under $(BUILD)/fakecuda. Owned by the fake-driver work.
fakecuda:
