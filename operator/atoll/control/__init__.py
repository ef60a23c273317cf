"""The async scheduling loop and the effects that apply engine decisions through ports."""
